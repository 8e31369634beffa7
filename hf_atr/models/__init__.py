"""Audio and text backbones that hf-atr adds to the transformers family (each registers with the Auto classes)."""

"""hf-atr: audio-text retrieval for the Hugging Face stack."""

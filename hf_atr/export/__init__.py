"""Export a trained model: a sentence-transformers folder (:mod:`.sentence_transformers_format`), ONNX graphs of
its two encoders (:mod:`.onnx_graphs`), and what runs those graphs (:mod:`.onnx_encoder`)."""

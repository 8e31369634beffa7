"""Export a trained model: a sentence-transformers folder (:mod:`.sentence_transformers_format`), ONNX graphs of its
two encoders (:mod:`.onnx_graphs`, int8 versions by :mod:`.quantization`), and what runs those graphs behind the
model's own methods (:mod:`.onnx_encoder`)."""

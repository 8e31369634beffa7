"""Sub-commands of ``hf-atr`` that live in modules of their own (the top floor, beside :mod:`hf_atr.cli`)."""

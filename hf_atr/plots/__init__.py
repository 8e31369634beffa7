"""Figures of what training and retrieval did, drawn with matplotlib (the optional extra ``hf-atr[plots]``).

Arrays in, a ``matplotlib.figure.Figure`` out: the callers (:mod:`hf_atr.evaluation.report`, the model card)
turn metrics and logs into arrays and save the figures. matplotlib is imported inside the drawing functions
(:func:`~hf_atr.plots.canvas.new_figure`), never at import time, and figures are drawn on the Agg canvas
without pyplot, so a user's interactive backend and pyplot's figure list are left alone.

- :mod:`~hf_atr.plots.retrieval`: R@k curves, the histogram of the true item's rank, a transport plan next to
  its score matrix.
- :mod:`~hf_atr.plots.classification`: the confusion matrix and per-class accuracy of zero-shot classification.
- :mod:`~hf_atr.plots.training`: the loss, the objective's logged terms and the evaluation curve over steps.
- :mod:`~hf_atr.plots.moments`: for a sample of queries, the similarity curve over a long recording with the
  annotated and the predicted moments.
"""

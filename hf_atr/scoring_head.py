"""The scoring head of the dual encoder: how a caption/audio pair of embeddings becomes a score and a logit.

Every score the library produces goes through :class:`AtrScoringHead`: the training objectives (its
:meth:`~AtrScoringHead.scale`, :meth:`~AtrScoringHead.bias`, :meth:`~AtrScoringHead.similarity` and
:meth:`~AtrScoringHead.distance`), the model's ``logits_per_text`` / ``logits_per_audio``, evaluation, zero-shot
classification and the retrieval index (:meth:`~AtrScoringHead.transform`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .configuration_atr import LOGIT_SCALE_FORMS

MAX_LOGIT_SCALE = 100.0
"""CLIP's cap on ``exp(logit_scale)`` (temperature ≥ 0.01), which keeps early training stable."""

_SQUARED_DISTANCE_FLOOR = 1e-12
"""Floor under squared distances before the square root, whose gradient is infinite at zero."""


def _capped_exp(log_scale: torch.Tensor) -> torch.Tensor:
    """``exp(log_scale)`` capped at :data:`MAX_LOGIT_SCALE`, computed in at least float32 (a 0-dim tensor, so
    it never changes the dtype of the scores it multiplies)."""
    return _at_least_float32(log_scale).exp().clamp(max=MAX_LOGIT_SCALE)


def _at_least_float32(value: torch.Tensor) -> torch.Tensor:
    return value.to(torch.promote_types(value.dtype, torch.float32))


def stored_logit_scale(logit_scale_init: float, form: str) -> float:
    """The initial value of the stored ``logit_scale`` parameter: ``logit_scale_init`` (a log factor) itself in
    the ``"log"`` form, its exponential in the ``"raw"`` form (so both start with the factor ``exp(init)``)."""
    if form not in LOGIT_SCALE_FORMS:
        raise ValueError(f"logit_scale_form must be one of {LOGIT_SCALE_FORMS}, got {form!r}.")
    return float(logit_scale_init) if form == "log" else math.exp(logit_scale_init)


class AtrScoringHead(nn.Module):
    r"""Scores caption/audio embedding pairs: cosine or dot-product similarity, or a negative ground-metric distance.

    - ``"cosine"``: ``s(t, a) = tᵀa`` (embeddings are unit vectors); ground metric ``1 − tᵀa``.
    - ``"dot"``: ``s(t, a) = tᵀa`` on embeddings that are *not* normalised (PE-Audio); it has no ground metric,
      so the OT objectives cannot use it.
    - ``"euclidean"``: ``s(t, a) = −‖t − a‖₂``.
    - ``"mahalanobis"``: ``s(t, a) = −sqrt((t − a)ᵀ M (t − a))`` with a learnable PSD ``M``
      (m-LTM Eq. 9), kept PSD by :meth:`project_to_psd_` after each optimizer step.

    Logits are ``scale · s + bias``. The scale is stored in ``scale_form``: ``"log"``, the factor is
    ``exp(logit_scale)`` capped at 100 (CLIP); ``"raw"``, the factor is ``logit_scale`` itself, uncapped
    (PE-Audio's ``text_audio_logit_scale``). With ``bias_init`` the head has a learnable ``logit_bias``
    (SigLIP Eq. 1's ``b``, PE-Audio's ``text_audio_logit_bias``); otherwise the bias is 0. A positive scale and
    any bias leave every ranking (retrieval, a softmax over a row) unchanged: only the sigmoid objective and the
    logits themselves see the bias. With ``separate_scales`` (CLAP's ``logit_scale_t`` / ``logit_scale_a``),
    ``logits_per_text`` use ``logit_scale`` and ``logits_per_audio`` a second parameter, ``audio_logit_scale``;
    otherwise both directions share ``logit_scale``. Scales and the bias are computed in at least float32 and the
    metric matrix is cast to the dtype of the embeddings it scores, so float32 objectives score exactly with a
    half-precision model.
    """

    def __init__(
        self,
        kind: str,
        dim: int,
        logit_scale_init: float,
        separate_scales: bool = False,
        *,
        scale_form: str = "log",
        bias_init: float | None = None,
    ) -> None:
        super().__init__()
        self.kind = kind
        self.scale_form = scale_form
        initial_scale = stored_logit_scale(logit_scale_init, scale_form)
        self.logit_scale = nn.Parameter(torch.tensor(initial_scale))
        if separate_scales:
            self.audio_logit_scale = nn.Parameter(torch.tensor(initial_scale))
        if bias_init is not None:
            self.logit_bias = nn.Parameter(torch.tensor(float(bias_init)))
        if kind == "mahalanobis":
            self.metric_matrix = nn.Parameter(torch.eye(dim))

    @property
    def normalizes_embeddings(self) -> bool:
        """Whether the model L2-normalises the embeddings this head scores (all kinds but ``"dot"``)."""
        return self.kind != "dot"

    def _factor(self, stored: torch.Tensor) -> torch.Tensor:
        return _capped_exp(stored) if self.scale_form == "log" else _at_least_float32(stored)

    def scale(self) -> torch.Tensor:
        """The factor of ``logits_per_text``: ``exp(logit_scale)`` capped at :data:`MAX_LOGIT_SCALE` (``"log"``
        form) or ``logit_scale`` itself (``"raw"``)."""
        return self._factor(self.logit_scale)

    def audio_scale(self) -> torch.Tensor:
        """The factor of ``logits_per_audio``: that of ``audio_logit_scale``, or :meth:`scale` when shared."""
        if not hasattr(self, "audio_logit_scale"):
            return self.scale()
        return self._factor(self.audio_logit_scale)

    def bias(self) -> torch.Tensor:
        """The 0-dim logit bias (SigLIP Eq. 1's ``b``) in at least float32; 0 for a head without one."""
        if not hasattr(self, "logit_bias"):
            return torch.zeros((), device=self.logit_scale.device)
        return _at_least_float32(self.logit_bias)

    def symmetric_metric(self) -> torch.Tensor:
        """``(dim, dim)`` ``(M + Mᵀ) / 2``, the matrix the quadratic form ``(x − y)ᵀ M (x − y)`` actually uses."""
        return (self.metric_matrix + self.metric_matrix.T) / 2

    def distance(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Ground metric between rows: ``x`` ``(n, dim)``, ``y`` ``(m, dim)`` → ``(n, m)``.

        Squared distances come from the expansion ``xᵀSx + ySy − 2xᵀSy`` (never an ``n × m × dim`` tensor),
        floored at 1e-12 before the square root so coincident points keep finite gradients. For
        Mahalanobis, ``S = (M + Mᵀ)/2``: the expansion with ``M`` itself has the same value, but its gradient
        with respect to ``M`` carries a spurious antisymmetric part (``−2 x yᵀ`` is not symmetric) that Adam
        would amplify before the projection; with ``S`` the gradient of each squared distance is exactly
        ``(x − y)(x − y)ᵀ``, as for the explicit ``(x − y)ᵀ M (x − y)`` (m-LTM Eq. 9, 11).

        Raises:
            ValueError: for ``"dot"`` scoring, whose unnormalised inner product is no distance.
        """
        if self.kind == "dot":
            raise ValueError(
                "scoring='dot' (unnormalised embeddings, PE-Audio) has no ground metric: the OT objectives and OT "
                "scoring need scoring='cosine', 'euclidean' or 'mahalanobis'."
            )
        if self.kind == "cosine":
            return 1.0 - x @ y.T
        if self.kind == "mahalanobis":
            metric = self.symmetric_metric().to(x.dtype)
            x_metric, y_metric = x @ metric, y @ metric
        else:
            x_metric, y_metric = x, y
        squared = (x_metric * x).sum(-1)[:, None] + (y_metric * y).sum(-1)[None, :] - 2.0 * x_metric @ y.T
        return squared.clamp(min=_SQUARED_DISTANCE_FLOOR).sqrt()

    def similarity(self, text_embeds: torch.Tensor, audio_embeds: torch.Tensor) -> torch.Tensor:
        """Unscaled ``(n_text, n_audio)`` similarity: the inner product (cosine, dot), or the negative ground metric."""
        if self.kind in ("cosine", "dot"):
            return text_embeds @ audio_embeds.T
        return -self.distance(text_embeds, audio_embeds)

    def forward(self, text_embeds: torch.Tensor, audio_embeds: torch.Tensor) -> torch.Tensor:
        """``(n_text, n_audio)`` logits = scale · similarity + bias (``logits_per_text``)."""
        return self._add_bias(self.scale() * self.similarity(text_embeds, audio_embeds))

    def audio_logits(self, audio_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        """``(n_audio, n_text)`` logits = audio scale · similarityᵀ + bias (``logits_per_audio``, zero-shot scores)."""
        return self._add_bias(self.audio_scale() * self.similarity(text_embeds, audio_embeds).T)

    def _add_bias(self, scaled: torch.Tensor) -> torch.Tensor:
        # A head without a bias returns the scaled scores untouched (bit for bit what format-2 models gave).
        return scaled + self.bias() if hasattr(self, "logit_bias") else scaled

    @torch.no_grad()
    def project_to_psd_(self) -> None:
        """Project ``M`` onto the PSD cone: symmetrise, clamp eigenvalues at 0. No-op otherwise.

        m-LTM's ``Proj`` (after Eq. 11) clamps singular values, which are never negative; the eigenvalues of
        the symmetric part are what must be clamped.
        """
        if self.kind != "mahalanobis":
            return
        symmetric = self.symmetric_metric()
        eigenvalues, eigenvectors = torch.linalg.eigh(
            symmetric.to(torch.promote_types(symmetric.dtype, torch.float32))
        )
        projected = (eigenvectors * eigenvalues.clamp(min=0)) @ eigenvectors.T
        self.metric_matrix.copy_((projected + projected.T) / 2)

    @torch.no_grad()
    def transform(self, embeds: torch.Tensor) -> torch.Tensor:
        """Map ``(n, dim)`` embeddings so that their Euclidean geometry is the head's metric (``M^{1/2} x``).

        Used to index Mahalanobis embeddings in an L2 index; identity for the other kinds.
        """
        if self.kind != "mahalanobis":
            return embeds
        symmetric = self.symmetric_metric()
        eigenvalues, eigenvectors = torch.linalg.eigh(
            symmetric.to(torch.promote_types(symmetric.dtype, torch.float32))
        )
        square_root = (eigenvectors * eigenvalues.clamp(min=0).sqrt()) @ eigenvectors.T
        return embeds @ square_root.to(embeds.dtype)


__all__ = ["MAX_LOGIT_SCALE", "AtrScoringHead", "stored_logit_scale"]

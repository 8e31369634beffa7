"""CLAP's audio tower (HTS-AT) with its Swin window attention computed by ``scaled_dot_product_attention``.

transformers' ``ClapAudioSelfAttention`` scores each window explicitly: ``softmax(q kᵀ / √d + B + M) v``, with
``B`` the learned relative position bias ``(heads, t, t)`` of the ``t = window_size²`` tokens of a window and
``M`` the shifted-window mask ``(windows, t, t)`` (−100 between tokens that the cyclic shift brought together
from different regions, 0 elsewhere), the attention probabilities held in memory in full.
:class:`ClapAudioSdpaSelfAttention` computes the same with ``torch.nn.functional.scaled_dot_product_attention``,
``B + M`` as its additive ``attn_mask``. It holds the same parameters and buffers under the same names, so
checkpoints load and save unchanged, and :func:`use_sdpa_window_attention` switches a built tower either way.

Which kernel runs: flash attention takes no dense additive mask, so on a GPU PyTorch picks the
memory-efficient kernel (which does take one, and gives the bias its gradient) or the math fallback. On a CPU
the result equals transformers' module to float32 rounding. Whether it is faster depends on the device: hf-atr
keeps transformers' module by default (``AtrConfig(audio_window_attention="eager")``).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.clap.modeling_clap import ClapAudioSelfAttention


class ClapAudioSdpaSelfAttention(ClapAudioSelfAttention):
    """``ClapAudioSelfAttention`` through ``scaled_dot_product_attention`` (same parameters, same outputs).

    ``output_attentions=True`` runs transformers' computation instead: SDPA does not return the probabilities.
    """

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = False,
    ) -> tuple[torch.Tensor, ...]:
        """Attention within windows.

        Args:
            hidden_states: ``(batch × windows, t, channels)``, the windows of each clip consecutive.
            attention_mask: the shifted-window mask ``(windows, t, t)``, or ``None`` (windows not shifted).

        Returns:
            ``(context,)``, ``context: (batch × windows, t, channels)``.
        """
        if output_attentions:
            return super().forward(hidden_states, attention_mask, output_attentions)
        batch_windows, tokens, channels = hidden_states.shape
        windows = 1 if attention_mask is None else attention_mask.shape[0]
        heads, head_size = self.num_attention_heads, self.attention_head_size
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        bias = bias.view(tokens, tokens, heads).permute(2, 0, 1).contiguous()  # attention kernels read rows
        mask = (
            bias.unsqueeze(0) if attention_mask is None else bias.unsqueeze(0) + attention_mask.unsqueeze(1)
        )
        # A clip's windows become heads of one attention call, so that the mask (windows × heads, t, t)
        # broadcasts over the clips instead of being copied for each.
        grouped = (batch_windows // windows, windows * heads, tokens, head_size)

        def split_heads(projection: nn.Linear) -> torch.Tensor:
            projected = projection(hidden_states).view(
                batch_windows // windows, windows, tokens, heads, head_size
            )
            return projected.permute(0, 1, 3, 2, 4).reshape(grouped)

        query, key, value = split_heads(self.query), split_heads(self.key), split_heads(self.value)
        context = nn.functional.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=mask.reshape(1, windows * heads, tokens, tokens).to(query.dtype),
            dropout_p=self.dropout.p if self.training else 0.0,
        )
        context = context.view(batch_windows // windows, windows, heads, tokens, head_size)
        return (context.permute(0, 1, 3, 2, 4).reshape(batch_windows, tokens, channels),)


def use_sdpa_window_attention(audio_tower: nn.Module, enabled: bool = True) -> int:
    """Make every HTS-AT window attention of ``audio_tower`` (a ``ClapAudioModel``, or a module holding one) a
    :class:`ClapAudioSdpaSelfAttention` (``enabled``) or transformers' ``ClapAudioSelfAttention``, in place;
    parameters and buffers are untouched.

    Returns:
        How many attention modules were set (0: the tower has no HTS-AT window attention).
    """
    attention_class = ClapAudioSdpaSelfAttention if enabled else ClapAudioSelfAttention
    modules = [module for module in audio_tower.modules() if isinstance(module, ClapAudioSelfAttention)]
    for module in modules:
        module.__class__ = attention_class
    return len(modules)


__all__ = ["ClapAudioSdpaSelfAttention", "use_sdpa_window_attention"]

"""PANNs CNN14 and ResNet38 (Kong et al., 2020) as transformers models over log-mel ``input_features``.

Module names follow the official PANNs code (``bn0``, ``conv_block1``…, ``resnet.layer1.0.conv1``,
``conv_block_after1``, ``fc1``), so an official checkpoint maps key for key
(:mod:`.convert_panns_checkpoint`); only the fixed STFT/mel weights live in
:class:`~.feature_extraction_panns.PannsFeatureExtractor` instead, and the AudioSet head
``fc_audioset`` is :class:`PannsForAudioClassification`'s ``classifier``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional
from transformers import AutoModel, AutoModelForAudioClassification, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPooling, SequenceClassifierOutput

from .configuration_panns import PannsConfig


class PannsConvBlock(nn.Module):
    """PANNs' ConvBlock: twice (3×3 convolution without bias → batch norm → ReLU), then average pooling."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, hidden_states: torch.Tensor, pool_size: tuple[int, int]) -> torch.Tensor:
        """``(batch, in_channels, time, mel)`` → ``(batch, out_channels, time / pool, mel / pool)``."""
        hidden_states = functional.relu(self.bn1(self.conv1(hidden_states)))
        hidden_states = functional.relu(self.bn2(self.conv2(hidden_states)))
        return functional.avg_pool2d(hidden_states, kernel_size=pool_size)


class PannsZeroInitBatchNorm(nn.BatchNorm2d):
    """A batch norm whose scale starts at zero: a residual block's last norm, so the block starts as the identity."""


class PannsResidualBlock(nn.Module):
    """ResNet38's basic block: a strided block average-pools 2×2 before its first convolution.

    Residual branch: [2×2 average pool] → 3×3 conv → BN → ReLU → dropout → 3×3 conv → BN. The shortcut is
    the identity, or (when the block changes resolution or width) [2×2 average pool] → 1×1 conv → BN
    (``downsample.1`` / ``downsample.2`` in the official layout, ``downsample.0``/``.1`` without pooling).
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, dropout_prob: float) -> None:
        super().__init__()
        self.stride = stride
        self.dropout_prob = dropout_prob
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = PannsZeroInitBatchNorm(out_channels)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            pooling = [nn.AvgPool2d(kernel_size=2)] if stride == 2 else []
            self.downsample = nn.Sequential(
                *pooling,
                nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        residual = functional.avg_pool2d(hidden_states, kernel_size=2) if self.stride == 2 else hidden_states
        residual = functional.relu(self.bn1(self.conv1(residual)))
        residual = functional.dropout(residual, p=self.dropout_prob, training=self.training)
        residual = self.bn2(self.conv2(residual))
        shortcut = hidden_states if self.downsample is None else self.downsample(hidden_states)
        return functional.relu(residual + shortcut)


class PannsResNetStages(nn.Module):
    """ResNet38's residual stages ``layer1`` … ``layerN``: the first keeps the resolution, the others halve it."""

    def __init__(self, config: PannsConfig) -> None:
        super().__init__()
        in_channels = config.conv_block_channels[0]
        self.stage_names = []
        for index, (channels, blocks) in enumerate(
            zip(config.resnet_stage_channels, config.resnet_stage_blocks), start=1
        ):
            stage = [
                PannsResidualBlock(
                    in_channels if block == 0 else channels,
                    channels,
                    stride=2 if index > 1 and block == 0 else 1,
                    dropout_prob=config.resnet_dropout_prob,
                )
                for block in range(blocks)
            ]
            in_channels = channels
            self.stage_names.append(f"layer{index}")
            self.add_module(f"layer{index}", nn.Sequential(*stage))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        for name in self.stage_names:
            hidden_states = getattr(self, name)(hidden_states)
        return hidden_states


class PannsPreTrainedModel(PreTrainedModel):
    config: PannsConfig
    config_class = PannsConfig
    base_model_prefix = "panns"
    main_input_name = "input_features"
    input_modalities = ("audio",)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """PANNs' initialisation: Xavier-uniform weights with zero biases, identity batch norms.

        ResNet38 also zeroes the scale of each residual block's last batch norm
        (:class:`PannsZeroInitBatchNorm`, as ``_ResnetBasicBlock.init_weights`` in the PANNs code).
        """
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.BatchNorm2d):
            if isinstance(module, PannsZeroInitBatchNorm):
                init.zeros_(module.weight)
            else:
                init.ones_(module.weight)
            init.zeros_(module.bias)
            init.zeros_(module.running_mean)
            init.ones_(module.running_var)
            init.zeros_(module.num_batches_tracked)


class PannsModel(PannsPreTrainedModel):
    r"""PANNs CNN14 or ResNet38 on log-mel ``input_features`` (batch, frames, mel bins).

    ``forward`` returns a :class:`~transformers.modeling_outputs.BaseModelOutputWithPooling`:

    - ``last_hidden_state`` ``(batch, time, hidden_size)``: the last ConvBlock's feature map averaged
      over frequency (``torch.mean(x, dim=3)`` in PANNs); ``time = frames // downsampling_factor``
      (32 for both published networks: 1001 frames of a 10-s clip give 31 steps).
    - ``pooler_output`` ``(batch, hidden_size)``: PANNs' clip embedding. Over time, max + mean of
      ``last_hidden_state`` (PANNs' global pooling), then dropout (p = 0.5 in training) and
      ``ReLU(fc1(·))``: exactly the ``embedding`` that PANNs' ``Cnn14.forward`` returns in eval
      mode, and the vector its AudioSet head reads. PANNs applies one more dropout to ``embedding`` in
      training only; it is left to the consumer (the dual encoder's projection follows it here).
      With ``use_embedding_layer=False`` there is no ``fc1``: ``pooler_output`` is the global pool
      itself (Mei et al., 2022 / m-LTM, which discard PANNs' last two layers).

    In training, dropout follows the PANNs code (after each block, inside residual blocks, before
    ``fc1``); SpecAugment and mixup, which PANNs applies to its own AudioSet training, are not included.
    """

    pooler_module_names = ("fc1",)
    """Modules that feed ``pooler_output`` only (:func:`hf_atr.towers.pooler_modules`)."""

    def __init__(self, config: PannsConfig) -> None:
        super().__init__(config)
        self.bn0 = nn.BatchNorm2d(config.num_mel_bins)
        channels = config.conv_block_channels
        if config.architecture == "cnn14":
            self.conv_block_names = [f"conv_block{index}" for index in range(1, len(channels) + 1)]
            for name, in_channels, out_channels in zip(self.conv_block_names, [1, *channels[:-1]], channels):
                self.add_module(name, PannsConvBlock(in_channels, out_channels))
        else:
            self.conv_block1 = PannsConvBlock(1, channels[0])
            self.resnet = PannsResNetStages(config)
            self.conv_block_after1 = PannsConvBlock(config.resnet_stage_channels[-1], channels[1])
        self.fc1 = nn.Linear(config.hidden_size, config.hidden_size) if config.use_embedding_layer else None
        self.post_init()

    def _check_input(self, input_features: torch.Tensor) -> None:
        if input_features.ndim != 3 or input_features.shape[-1] != self.config.num_mel_bins:
            raise ValueError(
                f"PannsModel takes input_features of shape (batch, frames, {self.config.num_mel_bins}) from "
                f"PannsFeatureExtractor, got {tuple(input_features.shape)}."
            )
        factor = self.config.downsampling_factor
        if input_features.shape[1] < factor or input_features.shape[2] < factor:
            raise ValueError(
                f"PANNs {self.config.architecture} pools time and mel bins by {factor}: it needs at least "
                f"{factor} frames and mel bins, got {input_features.shape[1]} frames × "
                f"{input_features.shape[2]} mel bins (pad short clips)."
            )

    def _dropout(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return functional.dropout(hidden_states, p=self.config.block_dropout_prob, training=self.training)

    def feature_map(self, input_features: torch.Tensor) -> torch.Tensor:
        """``(batch, frames, mel)`` → the last ConvBlock's map ``(batch, hidden_size, time, mel / factor)``."""
        hidden_states = input_features.unsqueeze(1)
        # bn0 normalises each mel bin: PANNs moves mel bins to the channel axis and back.
        hidden_states = self.bn0(hidden_states.transpose(1, 3)).transpose(1, 3)
        if self.config.architecture == "cnn14":
            last = len(self.conv_block_names) - 1
            for index, name in enumerate(self.conv_block_names):
                pool_size = (1, 1) if index == last else (2, 2)
                hidden_states = self._dropout(getattr(self, name)(hidden_states, pool_size=pool_size))
            return hidden_states
        hidden_states = self._dropout(self.conv_block1(hidden_states, pool_size=(2, 2)))
        hidden_states = self.resnet(hidden_states)
        hidden_states = self._dropout(functional.avg_pool2d(hidden_states, kernel_size=2))
        return self._dropout(self.conv_block_after1(hidden_states, pool_size=(1, 1)))

    def pool(self, frame_embeddings: torch.Tensor) -> torch.Tensor:
        """PANNs' clip embedding from ``(batch, time, hidden_size)``: max + mean over time, then ReLU(fc1)."""
        pooled = frame_embeddings.max(dim=1).values + frame_embeddings.mean(dim=1)
        if self.fc1 is None:
            return pooled
        pooled = functional.dropout(pooled, p=self.config.embedding_dropout_prob, training=self.training)
        return functional.relu(self.fc1(pooled))

    def forward(
        self, input_features: torch.Tensor, return_dict: bool | None = None, **kwargs
    ) -> BaseModelOutputWithPooling | tuple[torch.Tensor, torch.Tensor]:
        """Embed log-mel ``input_features`` ``(batch, frames, num_mel_bins)`` (see the class docstring)."""
        self._check_input(input_features)
        frame_embeddings = self.feature_map(input_features).mean(dim=3).transpose(1, 2)
        pooler_output = self.pool(frame_embeddings)
        if not (return_dict if return_dict is not None else self.config.return_dict):
            return frame_embeddings, pooler_output
        return BaseModelOutputWithPooling(last_hidden_state=frame_embeddings, pooler_output=pooler_output)


class PannsForAudioClassification(PannsPreTrainedModel):
    r"""PANNs with its clip-level classifier (``fc_audioset`` in the PANNs code, 527 AudioSet classes).

    ``logits`` ``(batch, num_labels)``; PANNs' ``clipwise_output`` is ``sigmoid(logits)``. With ``labels``,
    the loss is binary cross-entropy for ``problem_type="multi_label_classification"`` (AudioSet tagging,
    labels ``(batch, num_labels)`` in {0, 1}) and cross-entropy over class indices otherwise.
    """

    def __init__(self, config: PannsConfig) -> None:
        super().__init__(config)
        self.panns = PannsModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_features: torch.Tensor,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput | tuple[torch.Tensor, ...]:
        backbone_output = self.panns(input_features, return_dict=True)
        logits = self.classifier(backbone_output.pooler_output)
        loss = None
        if labels is not None:
            if self.config.problem_type == "multi_label_classification":
                loss = functional.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
            else:
                loss = functional.cross_entropy(logits, labels)
        if not (return_dict if return_dict is not None else self.config.return_dict):
            return (logits,) if loss is None else (loss, logits)
        return SequenceClassifierOutput(loss=loss, logits=logits)


def register_auto_models() -> None:
    """Make ``AutoModel`` and ``AutoModelForAudioClassification`` build PANNs from a :class:`PannsConfig`."""
    AutoModel.register(PannsConfig, PannsModel, exist_ok=True)
    AutoModelForAudioClassification.register(PannsConfig, PannsForAudioClassification, exist_ok=True)


__all__ = ["PannsForAudioClassification", "PannsModel", "PannsPreTrainedModel", "register_auto_models"]

"""Configuration of the PANNs CNN14 and ResNet38 audio backbones (Kong et al., 2020)."""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig

ARCHITECTURES = ("cnn14", "resnet38")

CNN14_CONV_BLOCK_CHANNELS = [64, 128, 256, 512, 1024, 2048]
"""Output channels of CNN14's six ConvBlocks (``conv_block1`` … ``conv_block6``)."""
RESNET38_CONV_BLOCK_CHANNELS = [64, 2048]
"""Output channels of ResNet38's ``conv_block1`` (before the residual stages) and ``conv_block_after1``."""
RESNET38_STAGE_CHANNELS = [64, 128, 256, 512]
"""Channels of ResNet38's residual stages ``resnet.layer1`` … ``resnet.layer4``."""
RESNET38_STAGE_BLOCKS = [3, 4, 6, 3]
"""Basic blocks per residual stage (3 + 4 + 6 + 3 = 16 blocks, 32 convolutions)."""


@strict
class PannsConfig(PreTrainedConfig):
    r"""Configuration of a :class:`~hf_atr.models.panns.PannsModel`: a PANNs CNN on log-mel features.

    The defaults build the published networks (Kong et al., "PANNs: Large-Scale Pretrained Audio Neural
    Networks for Audio Pattern Recognition", 2020): CNN14 (six ConvBlocks, 2048-d embedding, 80.8M
    parameters with the AudioSet head) or ResNet38 (a ConvBlock, four residual stages of basic blocks,
    a 2048-channel ConvBlock; 73.7M). Every size can be changed so that tests can build tiny ones.

    Args:
        architecture (`str`, defaults to `"cnn14"`):
            `"cnn14"` or `"resnet38"`.
        num_mel_bins (`int`, defaults to 64):
            Mel bins of the input log-mel spectrogram (the size of the `bn0` batch norm over mel bins).
        conv_block_channels (`list[int]`, *optional*):
            CNN14: output channels of each ConvBlock (2×2 average pooling after every block but the last,
            as in CNN14). ResNet38: exactly two values, the channels of `conv_block1` and of
            `conv_block_after1`. Defaults to the published sizes.
        resnet_stage_channels (`list[int]`, *optional*):
            ResNet38 only: channels of each residual stage (the first keeps the resolution, the others
            halve it). Defaults to `[64, 128, 256, 512]`.
        resnet_stage_blocks (`list[int]`, *optional*):
            ResNet38 only: basic blocks per stage. Defaults to `[3, 4, 6, 3]`.
        block_dropout_prob (`float`, defaults to 0.2):
            Dropout after each ConvBlock / after the residual stages.
        resnet_dropout_prob (`float`, defaults to 0.1):
            Dropout inside each residual basic block (after its first convolution).
        embedding_dropout_prob (`float`, defaults to 0.5):
            Dropout on the global pool before `fc1`.
        use_embedding_layer (`bool`, defaults to `True`):
            Whether `pooler_output` goes through PANNs' `fc1` + ReLU (PANNs' `embedding`). `False` drops
            `fc1`: `pooler_output` is the global max + mean pool, the encoder of Mei et al. (2022) that
            m-LTM fine-tunes ("we discard the last two layers").

    The embedding size is `hidden_size` (read-only): the channels of the last ConvBlock.

    Example:

    ```python
    >>> from hf_atr.models.panns import PannsConfig, PannsModel
    >>> model = PannsModel(PannsConfig(architecture="resnet38"))
    ```
    """

    model_type = "panns"

    architecture: str = "cnn14"
    num_mel_bins: int = 64
    conv_block_channels: list[int] | None = None
    resnet_stage_channels: list[int] | None = None
    resnet_stage_blocks: list[int] | None = None
    block_dropout_prob: float = 0.2
    resnet_dropout_prob: float = 0.1
    embedding_dropout_prob: float = 0.5
    use_embedding_layer: bool = True

    def __post_init__(self, **kwargs):
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"`architecture` must be one of {ARCHITECTURES}, got {self.architecture!r}.")
        if self.architecture == "cnn14":
            for field_name in ("resnet_stage_channels", "resnet_stage_blocks"):
                if getattr(self, field_name) is not None:
                    raise ValueError(f"`{field_name}` applies to architecture='resnet38' only.")
            if self.conv_block_channels is None:
                self.conv_block_channels = list(CNN14_CONV_BLOCK_CHANNELS)
            if len(self.conv_block_channels) < 2:
                raise ValueError(
                    f"cnn14 needs at least 2 ConvBlocks, got conv_block_channels={self.conv_block_channels}."
                )
        else:
            if self.conv_block_channels is None:
                self.conv_block_channels = list(RESNET38_CONV_BLOCK_CHANNELS)
            if self.resnet_stage_channels is None:
                self.resnet_stage_channels = list(RESNET38_STAGE_CHANNELS)
            if self.resnet_stage_blocks is None:
                self.resnet_stage_blocks = list(RESNET38_STAGE_BLOCKS)
            if len(self.conv_block_channels) != 2:
                raise ValueError(
                    "resnet38 takes exactly two conv_block_channels (conv_block1, conv_block_after1), got "
                    f"{self.conv_block_channels}."
                )
            if (
                len(self.resnet_stage_channels) != len(self.resnet_stage_blocks)
                or not self.resnet_stage_blocks
            ):
                raise ValueError(
                    "`resnet_stage_channels` and `resnet_stage_blocks` need one entry per stage, got "
                    f"{self.resnet_stage_channels} and {self.resnet_stage_blocks}."
                )
        for field_name in ("conv_block_channels", "resnet_stage_channels", "resnet_stage_blocks"):
            values = getattr(self, field_name)
            if values is not None and any(not isinstance(value, int) or value <= 0 for value in values):
                raise ValueError(f"`{field_name}` must hold positive integers, got {values}.")
        for field_name in ("block_dropout_prob", "resnet_dropout_prob", "embedding_dropout_prob"):
            if not 0.0 <= getattr(self, field_name) < 1.0:
                raise ValueError(f"`{field_name}` must be in [0, 1), got {getattr(self, field_name)!r}.")
        if self.num_mel_bins <= 0:
            raise ValueError(f"`num_mel_bins` must be positive, got {self.num_mel_bins!r}.")
        super().__post_init__(**kwargs)

    @property
    def hidden_size(self) -> int:
        """Channels of the last ConvBlock: the width of `last_hidden_state` and of the embedding."""
        return self.conv_block_channels[-1]

    @property
    def downsampling_factor(self) -> int:
        """How many input frames (and mel bins) one output step spans: every 2×2 average pooling halves both."""
        if self.architecture == "cnn14":
            return 2 ** (len(self.conv_block_channels) - 1)
        # conv_block1's pooling, one per strided stage, and the pooling after the residual stages.
        return 2 ** (len(self.resnet_stage_channels) + 1)


def register_auto_config() -> None:
    """Make ``AutoConfig`` resolve ``model_type="panns"`` without remote code."""
    AutoConfig.register(PannsConfig.model_type, PannsConfig, exist_ok=True)


__all__ = ["PannsConfig", "register_auto_config"]

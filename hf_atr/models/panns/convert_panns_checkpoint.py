"""Convert an official PANNs checkpoint (``Cnn14_mAP=0.431.pth``, ``ResNet38_mAP=0.434.pth``, ...) to safetensors.

The official files hold ``{"model": state_dict, ...}`` or a plain state dict. Every key is accounted for:

- ``bn0.*``, ``conv_block*.*``, ``resnet.layer*.*``, ``conv_block_after1.*``, ``fc1.*`` → the same names
  under :class:`~.modeling_panns.PannsModel` (``panns.<name>`` in the classification model);
- ``fc_audioset.*`` → ``classifier.*`` of :class:`~.modeling_panns.PannsForAudioClassification`;
- ``spectrogram_extractor.stft.conv_real/conv_imag.weight`` and ``logmel_extractor.melW`` (torchlibrosa's
  frozen STFT and mel weights) are not parameters here: they are checked against the
  :class:`~.feature_extraction_panns.PannsFeatureExtractor` that is saved beside the model.

Missing, unexpected and mismatched keys (and a front end that differs from the feature extractor's) raise
:class:`PannsCheckpointError` naming them; nothing is skipped. The STFT hop is not stored in checkpoints:
pass the one the checkpoint was trained with (320 for the 32 kHz models).

Command line::

    python -m hf_atr.models.panns.convert_panns_checkpoint --checkpoint Cnn14_mAP=0.431.pth \\
        --architecture cnn14 --out panns-cnn14
"""

from __future__ import annotations

import argparse
import csv
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from .configuration_panns import ARCHITECTURES, PannsConfig
from .feature_extraction_panns import PannsFeatureExtractor
from .modeling_panns import PannsForAudioClassification

OFFICIAL_CLASSIFIER_PREFIX = "fc_audioset."
STFT_REAL_KEY = "spectrogram_extractor.stft.conv_real.weight"
STFT_IMAG_KEY = "spectrogram_extractor.stft.conv_imag.weight"
MEL_FILTERS_KEY = "logmel_extractor.melW"
FRONT_END_RTOL = 1e-5
FRONT_END_ATOL = 1e-7
"""Tolerance between a checkpoint's float32 front-end weights and the extractor's float64 ones (rounding only)."""


class PannsCheckpointError(ValueError):
    """A checkpoint does not match the requested PANNs architecture or front end."""


def load_official_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The state dict of an official PANNs checkpoint file, loaded with ``weights_only=True``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"PANNs checkpoint {path} does not exist.")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise PannsCheckpointError(
            f"Cannot load {path} as a PyTorch checkpoint with weights_only=True ({type(error).__name__}: "
            f"{error}). Official PANNs checkpoints are ({{'model': state_dict}}) .pth files."
        ) from error
    state_dict = checkpoint.get("model", checkpoint) if isinstance(checkpoint, Mapping) else None
    if not isinstance(state_dict, Mapping):
        raise PannsCheckpointError(
            f"{path} holds a {type(checkpoint).__name__}, not a state dict or {{'model': state_dict}}."
        )
    not_tensors = sorted(key for key, value in state_dict.items() if not isinstance(value, torch.Tensor))
    if not_tensors:
        raise PannsCheckpointError(f"{path}: these entries of the state dict are not tensors: {not_tensors}.")
    return dict(state_dict)


def official_to_hf_keys(model: PannsForAudioClassification) -> dict[str, str]:
    """Map each official PANNs key to this package's key, from ``model``'s own state dict (one for one)."""
    prefix = f"{model.base_model_prefix}."
    mapping = {}
    for key in model.state_dict():
        if key.startswith(prefix):
            mapping[key[len(prefix) :]] = key
        else:
            mapping[OFFICIAL_CLASSIFIER_PREFIX + key[len("classifier.") :]] = key
    return mapping


def _front_end_mismatches(
    official_state: Mapping[str, torch.Tensor], feature_extractor: PannsFeatureExtractor
) -> tuple[list[str], list[str]]:
    """(missing front-end keys, descriptions of front-end weights that differ from the extractor's)."""
    stft_real, stft_imag = feature_extractor.stft_kernels()
    expected = {
        STFT_REAL_KEY: stft_real,
        STFT_IMAG_KEY: stft_imag,
        MEL_FILTERS_KEY: feature_extractor.mel_filters,
    }
    missing, differing = [], []
    for key, reference in expected.items():
        if key not in official_state:
            missing.append(key)
            continue
        stored = official_state[key].detach().to(torch.float64).numpy()
        if stored.shape != reference.shape:
            differing.append(
                f"{key} (checkpoint shape {tuple(stored.shape)} vs feature extractor {reference.shape})"
            )
        elif not np.allclose(stored, reference, rtol=FRONT_END_RTOL, atol=FRONT_END_ATOL):
            differing.append(
                f"{key} (max |difference| {np.abs(stored - reference).max():.3g} from the feature extractor's)"
            )
    return missing, differing


def convert_state_dict(
    official_state: Mapping[str, torch.Tensor],
    config: PannsConfig,
    feature_extractor: PannsFeatureExtractor,
    source: str = "the checkpoint",
) -> PannsForAudioClassification:
    """Build a :class:`PannsForAudioClassification` holding ``official_state``'s tensors, key for key.

    Raises:
        PannsCheckpointError: naming every missing, unexpected and shape-mismatched key, and front-end
            weights that differ from ``feature_extractor``'s STFT kernels / mel filter bank.
    """
    if config.num_mel_bins != feature_extractor.feature_size:
        raise ValueError(
            f"config.num_mel_bins={config.num_mel_bins} but the feature extractor makes "
            f"{feature_extractor.feature_size} mel bins."
        )
    with torch.device("meta"):
        model = PannsForAudioClassification(config)
    key_map = official_to_hf_keys(model)
    expected_shapes = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    missing_front_end, differing_front_end = _front_end_mismatches(official_state, feature_extractor)
    front_end_keys = {STFT_REAL_KEY, STFT_IMAG_KEY, MEL_FILTERS_KEY}
    missing = sorted(set(key_map) - set(official_state)) + missing_front_end
    unexpected = sorted(set(official_state) - set(key_map) - front_end_keys)
    mismatched = [
        f"{key} (checkpoint {tuple(official_state[key].shape)} vs model {expected_shapes[hf_key]})"
        for key, hf_key in key_map.items()
        if key in official_state and tuple(official_state[key].shape) != expected_shapes[hf_key]
    ]
    problems = [
        f"{label}: {', '.join(items)}"
        for label, items in (
            ("missing keys", missing),
            ("unexpected keys", unexpected),
            ("mismatched shapes", mismatched),
            ("front end differs", differing_front_end),
        )
        if items
    ]
    if problems:
        raise PannsCheckpointError(
            f"{source} does not match PANNs {config.architecture} with this feature extractor "
            f"({feature_extractor.sampling_rate} Hz, n_fft {feature_extractor.fft_window_size}, "
            f"{feature_extractor.feature_size} mel bins, {feature_extractor.frequency_min}–"
            f"{feature_extractor.frequency_max} Hz): " + "; ".join(problems) + "."
        )
    converted = {hf_key: official_state[key].detach().clone() for key, hf_key in key_map.items()}
    model.load_state_dict(converted, strict=True, assign=True)
    return model.eval()


def read_audioset_labels(path: str | os.PathLike) -> dict[int, str]:
    """``{index: display_name}`` from AudioSet's ``class_labels_indices.csv`` (``index,mid,display_name``)."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or not {"index", "display_name"} <= set(rows[0]):
        raise ValueError(
            f"{path} needs the columns index and display_name (AudioSet's class_labels_indices.csv)."
        )
    labels = {}
    for line, row in enumerate(rows, start=2):
        try:
            labels[int(row["index"])] = row["display_name"]
        except ValueError as error:
            raise ValueError(f"{path}, line {line}: index {row['index']!r} is not an integer.") from error
    return labels


def convert_panns_checkpoint(
    checkpoint_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    architecture: str = "cnn14",
    config: PannsConfig | None = None,
    feature_extractor: PannsFeatureExtractor | None = None,
    labels_csv: str | os.PathLike | None = None,
) -> PannsForAudioClassification:
    """Convert an official checkpoint file into a ``save_pretrained`` directory (safetensors + configs).

    The directory holds a :class:`PannsForAudioClassification` (``AutoModelForAudioClassification``;
    ``AutoModel`` loads its :class:`PannsModel` backbone) and the :class:`PannsFeatureExtractor`
    (``AutoFeatureExtractor``). ``num_labels`` comes from the checkpoint's ``fc_audioset`` rows; label
    names from ``labels_csv`` (AudioSet's ``class_labels_indices.csv``) when given.

    Args:
        config: the network's sizes (default: the published ``architecture``).
        feature_extractor: the front end the checkpoint was trained with (default: 32 kHz, n_fft 1024,
            hop 320, 64 mel bins, 50–14000 Hz).
    """
    official_state = load_official_state_dict(checkpoint_path)
    feature_extractor = feature_extractor or PannsFeatureExtractor()
    config = config or PannsConfig(architecture=architecture, num_mel_bins=feature_extractor.feature_size)
    classifier_weight = official_state.get(OFFICIAL_CLASSIFIER_PREFIX + "weight")
    if classifier_weight is not None and classifier_weight.ndim == 2:
        config.num_labels = classifier_weight.shape[0]
    config.problem_type = "multi_label_classification"
    if labels_csv is not None:
        labels = read_audioset_labels(labels_csv)
        if sorted(labels) != list(range(config.num_labels)):
            raise ValueError(
                f"{labels_csv} has {len(labels)} labels (indices {min(labels)}–{max(labels)}); the checkpoint's "
                f"classifier has {config.num_labels} rows."
            )
        config.id2label = labels
        config.label2id = {name: index for index, name in labels.items()}
    model = convert_state_dict(official_state, config, feature_extractor, source=str(checkpoint_path))
    model.save_pretrained(output_dir)
    feature_extractor.save_pretrained(output_dir)
    return model


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="official PANNs .pth file")
    parser.add_argument("--architecture", choices=ARCHITECTURES, default="cnn14")
    parser.add_argument("--out", required=True, help="output directory (save_pretrained layout)")
    parser.add_argument("--config", help="PannsConfig JSON for non-default sizes (overrides --architecture)")
    parser.add_argument("--labels-csv", help="AudioSet class_labels_indices.csv, for label names")
    parser.add_argument("--sample-rate", type=int, default=32000)
    parser.add_argument("--window-size", type=int, default=1024)
    parser.add_argument("--hop-size", type=int, default=320)
    parser.add_argument("--mel-bins", type=int, default=64)
    parser.add_argument("--fmin", type=float, default=50.0)
    parser.add_argument("--fmax", type=float, default=14000.0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m hf_atr.models.panns.convert_panns_checkpoint --checkpoint X --architecture cnn14 --out DIR``."""
    args = _parse_args(argv)
    feature_extractor = PannsFeatureExtractor(
        feature_size=args.mel_bins,
        sampling_rate=args.sample_rate,
        fft_window_size=args.window_size,
        hop_length=args.hop_size,
        frequency_min=args.fmin,
        frequency_max=args.fmax,
    )
    config = PannsConfig.from_json_file(args.config) if args.config else None
    model = convert_panns_checkpoint(
        args.checkpoint,
        args.out,
        architecture=args.architecture,
        config=config,
        feature_extractor=feature_extractor,
        labels_csv=args.labels_csv,
    )
    parameters = sum(parameter.numel() for parameter in model.parameters())
    print(
        f"Converted {args.checkpoint} → {args.out}: PANNs {model.config.architecture}, "
        f"{parameters / 1e6:.1f}M parameters, {model.config.num_labels} classes."
    )


if __name__ == "__main__":
    main()

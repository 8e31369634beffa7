"""``--moments``, ``--proposer`` and ``--nms-iou``: declared once, read alike by ``hf-atr search`` and
``hf-atr evaluate``."""

from __future__ import annotations

import pytest

from hf_atr.cli import build_parser
from hf_atr.commands.moment_options import PROPOSER_NAMES, moment_proposal
from hf_atr.moments.proposal import PROPOSERS, MomentProposalConfig

COMMANDS = {
    "hf-atr search": ["search", "--model", "m", "--index", "i", "a dog"],
    "hf-atr evaluate": ["evaluate", "--model", "m", "--dataset", "d"],
}


def option(command: str, dest: str):
    subparsers = next(action for action in build_parser()._actions if action.dest == "command")
    return next(action for action in subparsers.choices[command]._actions if action.dest == dest)


def test_both_commands_share_one_declaration():
    for dest in ("moments", "proposer", "nms_iou"):
        search, evaluate = option("search", dest), option("evaluate", dest)
        assert [getattr(search, name) for name in ("choices", "default", "type")] == [
            getattr(evaluate, name) for name in ("choices", "default", "type")
        ]
    assert option("search", "proposer").help == option("evaluate", "proposer").help
    # What --moments does differs: a ranked list across an index, or the moment metrics of a dataset.
    assert option("search", "moments").help != option("evaluate", "moments").help
    assert set(PROPOSER_NAMES.values()) == set(PROPOSERS)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], MomentProposalConfig()),
        (["--proposer", "baseline"], MomentProposalConfig(proposer="sliding_window")),
        (
            ["--proposer", "sliding_window", "--nms-iou", "0.3"],
            MomentProposalConfig(proposer="sliding_window", nms_iou=0.3),
        ),
        (["--nms-iou", "0.7"], MomentProposalConfig(nms_iou=0.7)),
    ],
)
def test_both_commands_read_the_same_proposal(command, flags, expected):
    args = build_parser().parse_args([*COMMANDS[command], "--moments", *flags])
    assert moment_proposal(args, command) == expected


@pytest.mark.parametrize("command", COMMANDS)
def test_both_commands_refuse_alike(command, capsys):
    parser = build_parser()
    assert moment_proposal(parser.parse_args(COMMANDS[command]), command) is None
    with pytest.raises(SystemExit, match=f"^{command}: --proposer and --nms-iou apply to --moments.$"):
        moment_proposal(
            parser.parse_args([*COMMANDS[command], "--proposer", "refined", "--nms-iou", "0.3"]), command
        )
    with pytest.raises(
        SystemExit, match=rf"^{command} --moments: nms_iou must be an IoU in \[0, 1\], got 2.0.$"
    ):
        moment_proposal(parser.parse_args([*COMMANDS[command], "--moments", "--nms-iou", "2"]), command)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([*COMMANDS[command], "--moments", "--proposer", "detr"])
    assert exit_info.value.code == 2 and "invalid choice: 'detr'" in capsys.readouterr().err

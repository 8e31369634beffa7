"""hf_atr.lazy: names resolved on first use, and a logger that imports transformers on its first message."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from hf_atr.lazy import DeferredLogger, get_logger, lazy_attributes


def test_lazy_attributes_resolve_cache_and_list_their_names(monkeypatch):
    package = types.ModuleType("lazy_probe")
    monkeypatch.setitem(sys.modules, "lazy_probe", package)
    package.__getattr__, package.__dir__ = lazy_attributes("lazy_probe", {"dumps": "json"})
    assert "dumps" in package.__dir__()
    assert package.dumps is __import__("json").dumps
    assert "dumps" in vars(package)  # cached: the hook is not asked again
    with pytest.raises(AttributeError, match="module 'lazy_probe' has no attribute 'loads'"):
        package.__getattr__("loads")


def test_a_moved_name_warns_each_time_and_is_not_listed(monkeypatch):
    package = types.ModuleType("lazy_probe")
    monkeypatch.setitem(sys.modules, "lazy_probe", package)
    package.__getattr__, package.__dir__ = lazy_attributes("lazy_probe", {"dumps": "json"}, {"loads": "json"})
    for _ in range(2):
        with pytest.deprecated_call(match=r"`lazy_probe.loads` moved to `json.loads`"):
            assert package.loads is __import__("json").loads
    assert "loads" not in package.__dir__() and "loads" not in vars(package)


def test_deferred_logger_logs_through_transformers_logging(caplog):
    logger = get_logger("hf_atr.lazy_probe")
    assert isinstance(logger, DeferredLogger) and logger._logger is None
    with caplog.at_level(logging.WARNING, logger="hf_atr.lazy_probe"):
        logger.warning("a skipped clip")
    assert "a skipped clip" in caplog.text
    assert isinstance(logger._logger, logging.Logger) and logger._logger.name == "hf_atr.lazy_probe"

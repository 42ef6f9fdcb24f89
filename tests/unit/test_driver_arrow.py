"""A CLI driver's serializers leave Ray Data's Arrow ones out (`rayapi.driver.without_arrow_serializers`)."""

from __future__ import annotations

import sys

import pytest

from ray_accel.rayapi import driver


def test_the_arrow_hook_becomes_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray._private.arrow_serialization as arrow

    # Put Ray's own hook back after the test, whatever it does.
    monkeypatch.setattr(arrow, driver.ARROW_HOOK, getattr(arrow, driver.ARROW_HOOK))
    registered: list[object] = []

    class Context:
        def _register_cloudpickle_serializer(self, cls: object, **kw: object) -> None:
            registered.append(cls)

    driver.without_arrow_serializers()
    getattr(arrow, driver.ARROW_HOOK)(Context())
    assert registered == []


def test_a_ray_without_the_hook_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray._private.arrow_serialization as arrow

    monkeypatch.delattr(arrow, driver.ARROW_HOOK)
    driver.without_arrow_serializers()  # no error: nothing to change
    assert not hasattr(arrow, driver.ARROW_HOOK)
    monkeypatch.setitem(sys.modules, driver.ARROW, None)  # no such module at all
    driver.without_arrow_serializers()

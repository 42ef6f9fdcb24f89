"""One lazily initialised, thread-safe NVML session (after nvitop's layer).

Every call goes through `Nvml.query`, which turns "not supported" and
"function not found" into the sentinel `NA` instead of an exception, so one
missing field never hides the others. The NVML module is injected: the real
`pynvml` (from nvidia-ml-py) by default, a fake object in tests.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Final

log = logging.getLogger(__name__)

# NVML return codes (nvml.h); stable across driver versions.
INVALID_ARGUMENT: Final = 2
NOT_SUPPORTED: Final = 3
NO_PERMISSION: Final = 4
NOT_FOUND: Final = 6
LIBRARY_NOT_FOUND: Final = 12
FUNCTION_NOT_FOUND: Final = 13
GPU_IS_LOST: Final = 15
DRIVER_NOT_LOADED: Final = 9
LIB_RM_VERSION_MISMATCH: Final = 18


class _NA:
    """Not available: unsupported by this GPU, driver or binding."""

    _instance: _NA | None = None

    def __new__(cls) -> _NA:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NA"

    def __bool__(self) -> bool:
        return False


NA: Final = _NA()


class NvmlUnavailable(Exception):
    """NVML cannot be used at all (no library, no driver, no GPU)."""


class GpuLost(Exception):
    """The GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)."""


def error_code(err: BaseException) -> int | None:
    value = getattr(err, "value", None)
    return value if isinstance(value, int) else None


class Nvml:
    def __init__(self, module: Any = None) -> None:
        self._module = module
        self._lock = threading.RLock()
        self._ready = False
        self._failure: str | None = None
        self._warned_mismatch = False

    @property
    def module(self) -> Any:
        if self._module is None:
            import pynvml  # nvidia-ml-py: the maintained distribution

            self._module = pynvml
        return self._module

    def ensure(self) -> None:
        """Initialise once; remember a failure so later calls fail fast."""
        with self._lock:
            if self._ready:
                return
            if self._failure is not None:
                raise NvmlUnavailable(self._failure)
            try:
                module = self.module
                module.nvmlInit()
            except ImportError as e:
                self._failure = f"nvidia-ml-py is not installed ({e})"
            except Exception as e:
                code = error_code(e)
                if code == LIBRARY_NOT_FOUND:
                    self._failure = "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this machine"
                elif code == DRIVER_NOT_LOADED:
                    self._failure = "NVIDIA driver is not loaded"
                elif code == LIB_RM_VERSION_MISMATCH:
                    self._failure = "NVML library and kernel driver versions differ (reboot or reload the driver)"
                else:
                    self._failure = f"nvmlInit failed: {e}"
            else:
                self._ready = True
                return
            raise NvmlUnavailable(self._failure)

    def query(self, name: str, *args: Any, default: Any = NA) -> Any:
        """Call `pynvml.<name>(*args)`; NA (or `default`) where unsupported."""
        self.ensure()
        with self._lock:
            fn = getattr(self.module, name, None)
            if fn is None:
                self._mismatch(name)
                return default
            try:
                return fn(*args)
            except Exception as e:
                code = error_code(e)
                if code in (NOT_SUPPORTED, NO_PERMISSION):
                    return default
                if code == FUNCTION_NOT_FOUND:
                    self._mismatch(name)
                    return default
                if code == GPU_IS_LOST:
                    raise GpuLost(f"{name}: GPU is lost") from None
                raise

    def _mismatch(self, name: str) -> None:
        if not self._warned_mismatch:
            self._warned_mismatch = True
            driver = "unknown"
            try:
                driver = str(self.module.nvmlSystemGetDriverVersion())
            except Exception:
                pass
            log.warning(
                "NVML binding is newer than the driver (%s): %s is missing; such fields are reported as NA",
                driver,
                name,
            )

    def shutdown(self) -> None:
        with self._lock:
            if self._ready:
                try:
                    self.module.nvmlShutdown()
                finally:
                    self._ready = False


def text(value: Any) -> str | None:
    """NVML returns bytes from older bindings and str from newer ones."""
    if value is NA or value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)

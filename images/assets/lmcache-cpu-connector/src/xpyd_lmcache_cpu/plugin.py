"""Register the CPU connector in LMCache's connector factory, without editing LMCache.

LMCache 0.5.6 picks its KV connector in ``lmcache.v1.gpu_connector.CreateGPUConnector``,
an if/elif over the torch device type with no plugin hook; for "cpu" it raises
"No supported cpu connector found" and LMCache falls back to recompute. vLLM
has a plugin hook: every ``vllm.general_plugins`` entry point runs in each vLLM
process (API server, engine core, workers) before the KV connector is built.
This package's entry point (see pyproject.toml) runs :func:`register`, which
wraps the factory so that vLLM + torch device "cpu" gets
:class:`~xpyd_lmcache_cpu.connector.VLLMPagedMemCPUConnector`; every other case
still goes to LMCache's own factory. Activation = installing this package
(CPU images only); ``VLLM_PLUGINS`` can exclude it by name.

The wrap is applied when LMCache's factory module is first imported (a one-shot
import hook), never at plugin load: importing LMCache that early kills vLLM CPU's
worker start (``register_triton_kernel_overrides`` then trips over an LMCache
object: "AttributeError: '_lib_fn_wrapper' object has no attribute 'get'"), and
vLLM processes that never use LMCache skip its ~1 s import. LMCache's callers
import the factory at call time (``from lmcache.v1.gpu_connector import
CreateGPUConnector``), so replacing the module attribute is enough.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

_FACTORY_MODULE = "lmcache.v1.gpu_connector"


def _wrap_factory(module: ModuleType) -> None:
    original = module.CreateGPUConnector
    if getattr(original, "_xpyd_cpu", False):
        return

    def create_gpu_connector(
        config: Any, metadata: Any, engine: Any, layout_hints: Any = None
    ) -> Any:
        from lmcache import torch_device_type
        from lmcache.logging import init_logger
        from lmcache.utils import EngineType

        if engine == EngineType.VLLM and torch_device_type == "cpu":
            from xpyd_lmcache_cpu.connector import VLLMPagedMemCPUConnector

            if config.use_layerwise or config.enable_blending:
                raise ValueError("the CPU connector supports neither layerwise nor blending")
            init_logger(__name__).info(
                "LMCache on CPU: using xpyd_lmcache_cpu.VLLMPagedMemCPUConnector"
            )
            return VLLMPagedMemCPUConnector.from_metadata(metadata)
        return original(config, metadata, engine, layout_hints=layout_hints)

    create_gpu_connector._xpyd_cpu = True  # type: ignore[attr-defined]
    module.CreateGPUConnector = create_gpu_connector  # type: ignore[attr-defined]


class _WrapOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """One-shot finder: loads the factory module normally, then wraps it."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _FACTORY_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__.loader = self._loader  # type: ignore[union-attr]
        self._loader.exec_module(module)
        _wrap_factory(module)


def register() -> None:
    """``vllm.general_plugins`` entry point; safe to call more than once."""
    if _FACTORY_MODULE in sys.modules:
        _wrap_factory(sys.modules[_FACTORY_MODULE])
    elif not any(isinstance(f, _WrapOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())

"""Make fedsweep's ``platform`` package the one that ``import platform`` returns.

Installed at the root of site-packages together with ``fedsweep_platform.pth``, whose single import line
runs this module at interpreter start-up. Our package name collides with the standard-library module
``platform``; stdlib directories come before site-packages on ``sys.path``, so without this step Ray
workers and pytest would import the stdlib module and then fail to unpickle anything from
``platform.*`` ("'platform' is not a package"). Our package re-exports the whole stdlib API, so code that
wants the stdlib module (Ray, torch, MLflow) keeps working.
"""
import importlib.util
import os
import sys


def _install() -> None:
    current = sys.modules.get("platform")
    if current is not None and hasattr(current, "__path__"):
        return
    for entry in list(sys.path):
        package_dir = os.path.join(entry or os.getcwd(), "platform")
        if not os.path.isfile(os.path.join(package_dir, "_boot", "_fedsweep_platform_boot.py")):
            continue
        spec = importlib.util.spec_from_file_location(
            "platform", os.path.join(package_dir, "__init__.py"), submodule_search_locations=[package_dir]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["platform"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            if current is not None:
                sys.modules["platform"] = current
            else:
                del sys.modules["platform"]
            raise
        return


_install()

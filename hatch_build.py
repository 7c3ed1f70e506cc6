"""Build hook: compile the optional C module ``langgraph_durable._core._tagfast``.

The module computes a record's integrity tag in one call (see ``_core/chain.py``); the
package computes the same bytes in Python without it. It is built when the machine has a
C compiler, Python's headers and OpenSSL's (libcrypto) headers; otherwise, or if the
build fails for any reason, the wheel is pure Python and says so in one line. Set
``LGD_NO_NATIVE=1`` to skip the build.

Regular wheels get the compiled file added (and a platform tag); editable installs get
it next to the source, where the package is imported from.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("langgraph_durable") / "_core" / "_tagfast.c"


def _compile(root: Path, out: Path) -> str | None:
    """Compile SOURCE into ``out``; None on success, else why not."""
    if sys.platform == "win32":
        return "not built on Windows"
    ldshared = sysconfig.get_config_var("LDSHARED")
    include = sysconfig.get_paths().get("include")
    if not ldshared or not include:
        return "no compiler configuration in sysconfig"
    cmd = [
        *shlex.split(ldshared),
        *shlex.split(sysconfig.get_config_var("CCSHARED") or "-fPIC"),
        "-O2",
        f"-I{include}",
        str(root / SOURCE),
        "-lcrypto",
        "-o",
        str(out),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return lines[-1] if lines else f"exit status {done.returncode}"
    return None


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("LGD_NO_NATIVE"):
            return
        root = Path(self.root)
        name = "_tagfast" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
        if version == "editable":
            target = root / SOURCE.parent / name
            why = _compile(root, target)
        else:
            self._tmp = tempfile.mkdtemp(prefix="lgd-build-")
            target = Path(self._tmp) / name
            why = _compile(root, target)
            if why is None:
                build_data["force_include"][str(target)] = str(SOURCE.parent / name)
        if why is not None:
            self.app.display_warning(
                f"langgraph-durable: the optional C module was not built ({why}); "
                "integrity tags are computed in Python"
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:  # the compiled file is in the wheel now
            shutil.rmtree(tmp, ignore_errors=True)

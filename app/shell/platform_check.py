"""Before Qt starts: are the system libraries of Qt's X11 (xcb) platform plugin there?

Qt's xcb plugin links a dozen small X libraries that a fresh Debian or Ubuntu machine
may not have; without one of them Qt aborts with "Could not load the Qt platform plugin
xcb" and a list of plugins, which does not say what to install. This module finds the
missing ones first and says the one ``apt-get install`` line that fixes it.

No Qt import here: it runs before a QApplication exists.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Mapping

# The shared libraries Qt 6's libqxcb.so and libQt6XcbQpa.so load (ldd), each with the
# Debian/Ubuntu package that holds it.
XCB_LIBRARIES: dict[str, str] = {
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
}


def can_load(soname: str) -> bool:
    """Whether the dynamic loader finds ``soname`` (what Qt's plugin loader will ask for)."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def qt_platform(environ: Mapping[str, str], platform: str = sys.platform) -> str:
    """The platform plugin Qt will try first: QT_QPA_PLATFORM's first entry, else what
    Qt picks on its own (wayland in a Wayland session, xcb elsewhere on Linux)."""
    if not platform.startswith("linux"):
        return "native"
    chosen = environ.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip()
    if chosen:
        return chosen
    if environ.get("XDG_SESSION_TYPE") == "wayland" and environ.get("WAYLAND_DISPLAY"):
        return "wayland"
    return "xcb"


def missing_packages(
    environ: Mapping[str, str] | None = None, platform: str | None = None, loadable: Callable[[str], bool] | None = None
) -> list[str]:
    """The Debian packages to install before Qt's xcb plugin can load; [] when nothing is
    missing or when the platform will not be xcb (offscreen, wayland, macOS, Windows).
    Unset arguments mean this process's environment, platform and loader."""
    env = os.environ if environ is None else environ
    if qt_platform(env, sys.platform if platform is None else platform) != "xcb":
        return []
    loadable = can_load if loadable is None else loadable
    return sorted({package for soname, package in XCB_LIBRARIES.items() if not loadable(soname)})


def install_hint(packages: list[str]) -> str:
    """The message for missing packages: what is wrong, and the one line that fixes it."""
    return (
        "traindesk-gui: Qt's X11 platform plugin (xcb) needs system libraries this machine lacks; "
        f"install them with:\n  sudo apt-get install {' '.join(packages)}\n"
        "(or run with QT_QPA_PLATFORM=wayland in a Wayland session, or offscreen without a display)"
    )


def check_platform_libraries(
    environ: Mapping[str, str] | None = None, platform: str | None = None, loadable: Callable[[str], bool] | None = None
) -> str | None:
    """None when the window can start; otherwise the message to print before exiting with 2."""
    packages = missing_packages(environ, platform, loadable)
    return install_hint(packages) if packages else None

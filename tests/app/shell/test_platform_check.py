"""The window's start checks Qt's X11 libraries first and names the packages to install."""

from __future__ import annotations

import pytest

import app.main as app_main
from app.shell.platform_check import XCB_LIBRARIES, check_platform_libraries, missing_packages, qt_platform

FRESH_DEBIAN = {"libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"}


def fresh_debian(soname: str) -> bool:  # a fake loader: everything but three libraries is there
    return soname not in FRESH_DEBIAN


def test_missing_xcb_libraries_name_their_debian_packages() -> None:
    env = {"DISPLAY": ":0"}
    assert missing_packages(env, "linux", fresh_debian) == ["libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1"]
    message = check_platform_libraries(env, "linux", fresh_debian)
    assert message is not None
    assert "sudo apt-get install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1" in message.splitlines()[1]
    assert check_platform_libraries(env, "linux", lambda _s: True) is None
    assert len(set(XCB_LIBRARIES.values())) == len(XCB_LIBRARIES)  # one package per library


@pytest.mark.parametrize(
    "env, platform, expected",
    [
        ({"QT_QPA_PLATFORM": "offscreen"}, "linux", "offscreen"),
        ({"QT_QPA_PLATFORM": "wayland;xcb"}, "linux", "wayland"),
        ({"QT_QPA_PLATFORM": "xcb"}, "linux", "xcb"),
        ({"XDG_SESSION_TYPE": "wayland", "WAYLAND_DISPLAY": "wayland-0"}, "linux", "wayland"),
        ({"DISPLAY": ":0"}, "linux", "xcb"),
        ({}, "darwin", "native"),
    ],
)
def test_only_the_xcb_platform_is_checked(env: dict[str, str], platform: str, expected: str) -> None:
    assert qt_platform(env, platform) == expected
    missing = missing_packages(env, platform, fresh_debian)
    assert bool(missing) == (expected == "xcb")


def test_gui_exits_2_with_the_install_line_before_starting_qt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    monkeypatch.setattr("app.shell.platform_check.can_load", fresh_debian)
    monkeypatch.setattr("app.shell.platform_check.sys.platform", "linux")

    def no_qt(*_a: object, **_k: object) -> None:
        raise AssertionError("QApplication must not be built when the libraries are missing")

    monkeypatch.setattr(app_main, "QApplication", no_qt)
    assert app_main.main([]) == 2
    assert "apt-get install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1" in capsys.readouterr().err

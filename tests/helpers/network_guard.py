"""A fixture that fails every network connection a test's process tries, and records it:
pretrained-weights tests must find their files on disk (or refuse in one line), never download."""
import socket

import pytest


@pytest.fixture
def no_network(monkeypatch):
    """The list of addresses connected to (it stays empty when nothing tried); each attempt
    raises OSError as an unreachable network would."""
    attempts = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(address)
        raise OSError(101, "network disabled by the test's guard")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    def resolve(host, port, *args, **kwargs):  # a name lookup is the first step of any download
        attempts.append((host, port))
        raise socket.gaierror(-2, "network disabled by the test's guard")

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    return attempts


@pytest.fixture
def torch_home(tmp_path, monkeypatch):
    """An empty TORCH_HOME for the test: torch.hub's cache is ``<it>/hub/checkpoints``."""
    home = tmp_path / "torch_home"
    home.mkdir()
    monkeypatch.setenv("TORCH_HOME", str(home))
    monkeypatch.delenv("UP_OFFLINE", raising=False)
    return home

"""Control connections kept open (rocelab.kernel.control.Connections): the requests a sampler makes
20 times a second reach an agent on one connection, and a connection that breaks is made again."""

from __future__ import annotations

import select
import threading

import pytest

from rocelab.kernel.control import AgentUnreachable, Connections, ControlServer, request


class Agent:
    """A ControlServer driven as an agent's loop drives it (accept, serve), from a thread;
    counts the connections it accepted."""

    def __init__(self, path, handler=lambda req: {"n": req.get("n")}):
        self.server = ControlServer(path, handler)
        self.accepted = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        server = self.server
        while not self.stopping.is_set():
            fds = [server.listener, *server.clients]
            readable, _, _ = select.select(fds, [], [], 0.01)
            for sock in readable:
                if sock is server.listener:
                    self.accepted += server.accept() is not None
                else:
                    server.serve(sock)

    def stop(self):
        self.stopping.set()
        self.thread.join()
        self.server.close()


def test_kept_connections_carry_every_request_on_one_connection(tmp_path):
    agent = Agent(tmp_path / "a.sock")
    try:
        with Connections() as connections:
            assert [connections.request(agent.server.path, "counters", n=n)["n"] for n in range(20)] == list(range(20))
        assert agent.accepted == 1
        assert request(agent.server.path, "counters", n=7)["n"] == 7  # one-shot: a connection of its own
        assert agent.accepted == 2
    finally:
        agent.stop()


def test_a_kept_connection_to_an_agent_that_restarted_is_made_again(tmp_path):
    path = tmp_path / "a.sock"
    first = Agent(path)
    connections = Connections()
    try:
        assert connections.request(path, "ping", n=1)["n"] == 1
        first.stop()
        second = Agent(path)
        try:
            assert connections.request(path, "ping", n=2)["n"] == 2
            assert second.accepted == 1
        finally:
            second.stop()
        with pytest.raises(AgentUnreachable, match="did not answer 'ping'"):
            connections.request(path, "ping")
        assert not connections.open  # a failed connection is not kept
    finally:
        connections.close()


def test_a_refusal_keeps_the_connection_and_a_timeout_is_not_asked_twice(tmp_path):
    """...and the agent, whose reply then finds the client gone, goes on serving (its loop used to
    stop on the broken pipe)."""

    def handler(req):
        if req["op"] == "slow":
            threading.Event().wait(0.5)
        if req["op"] == "bad":
            raise ValueError("no such thing")
        return {}

    agent = Agent(tmp_path / "a.sock", handler)
    try:
        with Connections() as connections:
            with pytest.raises(RuntimeError, match="refused 'bad': ValueError: no such thing"):
                connections.request(agent.server.path, "bad")
            connections.request(agent.server.path, "ping")
            assert agent.accepted == 1
            with pytest.raises(AgentUnreachable, match="timed out"):
                connections.request(agent.server.path, "slow", timeout_s=0.1)
            assert agent.accepted == 1  # not retried on a fresh connection
        threading.Event().wait(0.6)  # the slow reply was written to a client that left
        assert agent.thread.is_alive() and request(agent.server.path, "ping") == {"ok": True}
    finally:
        agent.stop()

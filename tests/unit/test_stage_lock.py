"""The stage lock is renewed while a playbook runs, so a long GPU check or restart cannot outlast it."""

import time

from cutover.deploy import _locks_kept

from .test_hoststate import make_state


def test_locks_are_renewed_while_the_body_runs(local_inventory):
    state = make_state(local_inventory)
    lock = state.acquire_lock("stage", ttl_s=0.3)
    first_expiry = lock.expires_at
    said = []
    with _locks_kept({"local": state}, {"local": lock}, 0.3, said.append):
        time.sleep(0.8)  # without renewals the lock would have expired twice over
        assert state.read_lock().expires_at > first_expiry + 0.3
        assert not state.read_lock().expired(state.now())
    assert said == []


def test_a_lost_lock_is_reported_when_the_body_ends(local_inventory):
    state = make_state(local_inventory)
    lock = state.acquire_lock("stage", ttl_s=0.3)
    state.release_lock(lock)
    state.transport.create_exclusive(state.paths.lock, '{"owner": "bob@test", "action": "shadow", '
                                                       '"acquired_at": 0, "expires_at": 9e9, "token": "bobs"}')
    said = []
    with _locks_kept({"local": state}, {"local": lock}, 0.3, said.append):
        time.sleep(0.25)
        assert said == []  # reported when the playbook ends, not in the middle of its output
    assert said and said[0].startswith("local: the stage lock could not be renewed: host local: our lock was lost")
    assert state.read_lock().token == "bobs"  # the other operator's lock is left alone

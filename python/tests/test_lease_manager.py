"""`with authority.lease(...)`: kept by core's keeper, ended by the block."""

import threading
import time

import pytest

import baton


def test_a_clean_exit_completes(auth):
    with auth.lease("job", "w1", ttl=3) as lease:
        assert lease.fence == auth.holder("job").fence
        assert auth.verify("job", lease.fence).current
        assert not lease.lost.is_set()
    assert auth.get("job").state == "SUCCEEDED"
    assert isinstance(lease.result, baton.Record) and lease.result.state == "SUCCEEDED"


def test_an_exception_fails_the_task_and_propagates(auth):
    with pytest.raises(KeyError):
        with auth.lease("job", "w1", ttl=3):
            raise KeyError("missing input")
    rec = auth.get("job")
    assert rec.state == "FAILED"
    assert rec.error == {"type": "KeyError", "message": "'missing input'"}


def test_the_lease_is_renewed_while_the_block_runs(auth):
    with auth.lease("long", "w1", ttl=0.6) as lease:
        first = lease.expiry
        time.sleep(1.5)
        assert lease.renewals >= 2
        assert lease.expiry > first
        assert auth.holder("long").live
        assert not lease.lost.is_set()
    assert auth.get("long").state == "SUCCEEDED"


def test_release_gives_the_task_back(auth):
    with auth.lease("job", "w1", ttl=3) as lease:
        assert lease.release().state == "REGISTERED"
        assert auth.claim("job", "w2")
    # The block's end reported nothing: w2 holds it still.
    assert auth.holder("job").owner == "w2" and auth.holder("job").live


def test_a_refused_claim_raises_refused_with_the_refusal(auth):
    auth.claim("busy", "other", ttl=30)
    with pytest.raises(baton.Refused) as e:
        with auth.lease("busy", "w1"):
            pytest.fail("the block must not run")
    assert e.value.refusal.reason == "held" and e.value.refusal.holder == "other"


def test_an_operators_cancel_sets_cancelled_and_release_cancels(auth):
    with auth.lease("asked", "w1", ttl=0.6) as lease:
        auth.cancel("asked", operator="alice")
        assert lease.cancelled.wait(5), "the keeper must say a cancel was asked"
        assert not lease.lost.is_set()
        lease.release()
    assert auth.get("asked").state == "CANCELLED"


def test_losing_the_lease_sets_lost_and_a_clean_exit_raises(auth):
    with pytest.raises(baton.Refused) as e:
        with auth.lease("job", "w1", ttl=0.6) as lease:
            # An operator takes the task away; the next renewal is refused.
            auth.cancel("job", operator="alice", force=True)
            assert lease.lost.wait(5), "the keeper must say the lease is lost"
            assert "refused" in lease.loss
    assert e.value.refusal.reason in ("illegal_transition", "stale_fence", "not_holder")
    assert auth.get("job").state == "CANCELLED"


def test_lost_is_set_before_the_lease_can_run_out_when_the_store_stops_answering(tmp_path):
    # The server goes away under the keeper: no renewal is confirmed, and
    # `lost` must be set while the lease is still live.
    import conftest

    s = conftest.Server(f"sqlite:{tmp_path / 's.db'}")
    a = baton.authority_for(s.url)
    try:
        with pytest.raises(baton.Error):
            with a.lease("job", "w1", ttl=2) as lease:
                expiry = lease.expiry
                s.stop()
                assert lease.lost.wait(5)
                import datetime

                assert datetime.datetime.now(datetime.timezone.utc) < expiry
    finally:
        s.stop()


def test_another_thread_may_use_and_release_the_lease(auth):
    with auth.lease("job", "w1", ttl=3) as lease:
        seen = []

        def other():
            seen.append(auth.verify("job", lease.fence).current)
            seen.append(lease.release().state)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert seen == [True, "REGISTERED"]
    # Released by the other thread: the block's end reported nothing.
    assert auth.get("job").state == "REGISTERED"

"""Every store URL the CLI takes works from Python: the distributed ones too."""

import uuid

import pytest

import baton


@pytest.fixture(params=["etcd", "postgres"])
def distributed_url(request):
    return request.getfixturevalue(f"{request.param}_url")


def test_the_authority_and_a_kept_lease_on_a_distributed_store(distributed_url):
    a = baton.authority_for(distributed_url)
    task = f"t-{uuid.uuid4()}"
    g = a.claim(task, "w1", ttl=10)
    assert isinstance(g, baton.Grant)
    held = a.claim(task, "w2", ttl=10)
    assert held.reason == "held" and held.holder == "w1" and held.fence == g.fence
    assert a.complete(task, "w1", g.fence).state == "SUCCEEDED"
    assert a.claim(task, "w2").reason == "completed"
    leased = f"l-{uuid.uuid4()}"
    with a.lease(leased, "w1", ttl=3) as lease:
        assert a.verify(leased, lease.fence).current
    assert a.get(leased).state == "SUCCEEDED"
    a.close()

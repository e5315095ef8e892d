"""The package over a `baton serve`: the same API, a server's own errors."""

import baton


def test_the_api_over_http(server):
    a = baton.authority_for(server.url)
    g = a.claim("t", "w1", ttl=30)
    assert isinstance(g, baton.Grant)
    assert a.claim("t", "w2").reason == "held"
    assert a.complete("t", "w1", g.fence).state == "SUCCEEDED"
    with a.lease("leased", "w1", ttl=3) as lease:
        assert a.verify("leased", lease.fence).current
    assert a.get("leased").state == "SUCCEEDED"


def test_tokens_decide_who_may_ask(server_with_tokens):
    url = server_with_tokens.url
    try:
        baton.authority_for(url).claim("t", "w1")
        raise AssertionError("a server with tokens must refuse a caller without one")
    except baton.NotPermitted as e:
        assert e.kind == "not_permitted"
    worker = baton.authority_for(url, token="w1-token-0123456789abcdef")
    g = worker.claim("t", "w1")
    assert g
    try:
        worker.cancel("t", operator="w1")
        raise AssertionError("a worker's token may not cancel as an operator")
    except baton.NotPermitted:
        pass
    ops = baton.authority_for(url, token="op-token-0123456789abcdef")
    assert ops.cancel("t", operator="ops", force=True).state == "CANCELLED"

//! What a store remembers: the outbox, one total order of events, and everything across a reopen.

use crate::conformance::fixtures::*;
use crate::conformance::*;

/// Notifications are written with their transition, returned until
/// acknowledged, with stable intent ids; acknowledging is idempotent.
pub fn notifications_in_outbox_until_acked<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let (t, w, run) = (id("notify"), id("w"), id("run"));
    ctx.block_on(a.declare(manifest(t.as_str(), 1, &[], 60, 1)))
        .unwrap();
    ctx.block_on(a.register(&t, &run)).unwrap();
    let f = fence(&ctx.block_on(a.task_claim(&t, &run, &w, None)).unwrap());
    assert!(
        ctx.block_on(a.pending(None, 100)).unwrap().items.is_empty(),
        "only STARTED, SUCCEEDED, FAILED by default"
    );
    let started = ctx.block_on(a.start(&t, &run, &w, f)).unwrap();
    let p = ctx.block_on(a.pending(None, 100)).unwrap().items;
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].kind, EventKind::Started);
    assert_eq!(
        p[0].payload["revision"],
        json!(started.record().unwrap().revision),
        "written in the transition's commit"
    );
    assert_eq!(p[0].payload["fence"], json!(f));
    ctx.block_on(a.heartbeat(&t, &run, &w, f, 1, None)).unwrap();
    let after_heartbeat = ctx.block_on(a.pending(None, 100)).unwrap().items;
    assert_eq!(after_heartbeat.len(), 1, "a heartbeat notifies nothing");
    ctx.block_on(a.succeed(&t, &run, &w, f, BTreeMap::new()))
        .unwrap();
    let p1 = ctx.block_on(a.pending(None, 100)).unwrap().items;
    let p2 = ctx.block_on(a.pending(None, 100)).unwrap().items;
    assert_eq!(
        p1, p2,
        "delivered again, with the same intent ids, until acknowledged"
    );
    assert_eq!(
        p1.iter().map(|n| n.kind).collect::<Vec<_>>(),
        [EventKind::Started, EventKind::Succeeded]
    );
    assert_ne!(p1[0].intent_id, p1[1].intent_id);
    assert_eq!(ctx.block_on(a.ack(&[p1[0].intent_id.clone()])).unwrap(), 1);
    let unknown = "00000000-0000-0000-0000-000000000000".to_owned();
    assert_eq!(
        ctx.block_on(a.ack(&[p1[0].intent_id.clone(), unknown]))
            .unwrap(),
        0
    );
    // Only intent ids are acknowledged: anything else is bad input, and
    // nothing in the batch is acknowledged.
    let e = ctx
        .block_on(a.ack(&[p1[1].intent_id.clone(), "t/76696374696d".to_owned()]))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("intent_id"), "{e}");
    let p3 = ctx.block_on(a.pending(None, 100)).unwrap().items;
    assert_eq!(p3, vec![p1[1].clone()]);
    // Paging by cursor.
    let first = ctx.block_on(a.pending(None, 1)).unwrap();
    assert_eq!(first.items.len(), 1);
    let rest = ctx.block_on(a.pending(first.next.as_deref(), 10)).unwrap();
    assert!(rest.items.is_empty());
    ctx.block_on(a.ack(&[p1[1].intent_id.clone()])).unwrap();
    assert!(ctx.block_on(a.pending(None, 100)).unwrap().items.is_empty());
    // Bare tasks never notify.
    let f = fence(&ctx.block_on(a.claim(&id("bare"), &w, None)).unwrap());
    ctx.block_on(a.complete(&id("bare"), &w, f)).unwrap();
    assert!(ctx.block_on(a.pending(None, 100)).unwrap().items.is_empty());
}

/// All events of the store share one strictly increasing sequence.
pub fn events_in_one_total_order<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let w = id("w");
    let tasks: Vec<TaskId> = (0..4).map(|i| id(&format!("ev-{i}"))).collect();
    let mut fences = HashMap::new();
    for t in &tasks {
        fences.insert(
            t.clone(),
            fence(&ctx.block_on(a.claim(t, &w, None)).unwrap()),
        );
    }
    for t in tasks.iter().rev() {
        ctx.block_on(a.renew(t, &w, fences[t], None)).unwrap();
    }
    for t in &tasks {
        ctx.block_on(a.complete(t, &w, fences[t])).unwrap();
    }
    let all = ctx.all_events();
    assert_eq!(all.len(), 12);
    assert!(all.windows(2).all(|p| p[0].seq < p[1].seq));
    let kinds: Vec<_> = all.iter().map(|e| e.kind).collect();
    assert_eq!(&kinds[..4], &[EventKind::Claimed; 4]);
    assert_eq!(
        all[4].task, tasks[3],
        "renewals in the order they were made"
    );
    for t in &tasks {
        let mine: Vec<_> = all.iter().filter(|e| &e.task == t).cloned().collect();
        assert_eq!(ctx.task_events(t), mine);
    }
    // Paging over the whole log returns each event once.
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = ctx.block_on(a.events(None, after.as_deref(), 5)).unwrap();
        seen.extend(page.items.iter().map(|e| e.seq));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, all.iter().map(|e| e.seq).collect::<Vec<_>>());
}

/// Everything committed is there after a reopen (durable stores).
pub fn durable_across_reopen<H: Harness>(ctx: &mut Ctx<H>) {
    let a = ctx.auth();
    let (t, d, w, run) = (id("keep"), id("keep-declared"), id("w"), id("run"));
    let f = fence(&ctx.block_on(a.claim(&t, &w, Some(600_000))).unwrap());
    ctx.block_on(a.declare(manifest(d.as_str(), 1, &["log"], 60, 1)))
        .unwrap();
    ctx.block_on(a.register(&d, &run)).unwrap();
    let fd = fence(&ctx.block_on(a.task_claim(&d, &run, &w, None)).unwrap());
    ctx.block_on(a.start(&d, &run, &w, fd)).unwrap();
    ctx.block_on(a.succeed(
        &d,
        &run,
        &w,
        fd,
        BTreeMap::from([("log".to_owned(), hash('c'))]),
    ))
    .unwrap();
    let rec_t = ctx.block_on(a.get(&t)).unwrap().unwrap();
    let rec_d = ctx.block_on(a.get(&d)).unwrap().unwrap();
    let events = ctx.all_events();
    let pending = ctx.block_on(a.pending(None, 100)).unwrap().items;
    drop(a);
    ctx.reopen();
    let a = ctx.auth();
    assert_eq!(ctx.block_on(a.get(&t)).unwrap().unwrap(), rec_t);
    assert_eq!(ctx.block_on(a.get(&d)).unwrap().unwrap(), rec_d);
    assert_eq!(ctx.all_events(), events);
    assert_eq!(ctx.block_on(a.pending(None, 100)).unwrap().items, pending);
    let h = ctx.block_on(a.holder(&t)).unwrap().unwrap().unwrap();
    assert_eq!(
        (h.grant.fence, h.live),
        (f, true),
        "a live grant survives a reopen"
    );
    let r = ctx.block_on(a.claim(&t, &id("intruder"), None)).unwrap();
    assert!(matches!(refusal(&r), Refusal::Held { .. }));
}

//! HTTPS: a server with a certificate answers an `https://` store that
//! trusts its CA; a client that does not trust it, or speaks plain HTTP to
//! it, gets no answer and nothing is applied.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::{Authority, ErrorKind, Id, MemoryStore, Store, SystemClock};
use baton_server::{Listen, ServeOptions};
use baton_store_http::{HttpOptions, HttpStore};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_store_is_answered_only_when_it_trusts_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let (cert_pem, key_pem) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_pem, cert.cert.pem()).unwrap();
    std::fs::write(&key_pem, cert.signing_key.serialize_pem()).unwrap();

    let backing = MemoryStore::new();
    let mut opts = ServeOptions::new(Listen::Tcp("127.0.0.1:0".parse().unwrap()));
    opts.tls = Some(baton_store_http::tls::server_config(&cert_pem, &key_pem).unwrap());
    let served = baton_server::spawn(Arc::new(backing.clone()), opts)
        .await
        .unwrap();
    let url = served.url().unwrap();
    assert!(url.starts_with("https://"), "{url}");

    let trusted = format!("{url}?ca={}", cert_pem.display());
    let store = HttpStore::connect(&trusted, HttpOptions::default())
        .await
        .unwrap();
    let a = Authority::new(store, Arc::new(SystemClock));
    let t = Id::parse("task", "over-tls").unwrap();
    let g = a
        .claim(&t, &Id::parse("owner", "w").unwrap(), Some(60_000))
        .await
        .unwrap()
        .grant()
        .expect("granted over TLS");
    assert_eq!(g.fence, 1);

    // The system's roots do not hold a self-signed certificate.
    let e = HttpStore::connect(&url, HttpOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    // Plain HTTP to a TLS port is no answer.
    let plain = url.replacen("https://", "http://", 1);
    let e = HttpStore::connect(&plain, HttpOptions::default())
        .await
        .unwrap_err();
    assert!(e.kind.is_temporary(), "{e}");
    // A bad certificate file is refused naming the field.
    let e = baton_store_http::tls::server_config(&key_pem, &key_pem).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("tls-cert"), "{e}");

    let snap = backing
        .read(&t, baton_core::Timestamp::from_millis(0))
        .await
        .unwrap();
    assert_eq!(
        snap.unwrap().record.current_fence(),
        Some(1),
        "only the trusted client wrote"
    );
    served.stop().await;
}

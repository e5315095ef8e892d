//! Spans over OTLP (`baton serve --otlp URL`, the `otlp` feature): one a
//! request, the child of the caller's `traceparent` header when it sends
//! one, and one a decision on a task added with a `traceparent`, the child
//! of that trace context, so a task's grants, reports and refusals show in
//! the trace it was added in. Exported in batches by OpenTelemetry's SDK
//! to an OTLP gRPC collector; a collector that cannot be reached costs
//! the spans, never a request. Without the feature this is a no-op, and
//! `--otlp` is refused naming the feature.

use baton_core::decide::Decision;
use baton_core::{Error, RequestKind, TaskId};
use std::time::SystemTime;

/// The trace context a decision's task was added in, if any.
fn traceparent_of(d: &Decision) -> Option<&str> {
    d.current
        .as_ref()
        .or(d.record_to_write())?
        .node
        .as_ref()?
        .spec
        .traceparent
        .as_deref()
}

/// What a decision came to, as a span says it.
fn outcome_of(d: &Decision) -> (String, Option<u64>) {
    use baton_core::Verdict;
    match &d.verdict {
        Verdict::Commit(c) if c.mints_fence => (
            "granted".to_owned(),
            c.record.lease.as_ref().map(|l| l.fence),
        ),
        Verdict::Commit(_) => ("committed".to_owned(), None),
        Verdict::Ack => ("acknowledged".to_owned(), None),
        Verdict::Refuse { refusal, .. } => (format!("refused: {}", refusal.reason()), None),
        Verdict::Invalid(_) => ("invalid".to_owned(), None),
    }
}

#[cfg(feature = "otlp")]
mod otlp {
    use super::*;
    use opentelemetry::KeyValue;
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _, TracerProvider as _};
    use opentelemetry_otlp::WithExportConfig;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use opentelemetry_sdk::trace::{
        BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
    };
    use std::collections::HashMap;
    use std::time::Duration;

    pub(crate) struct Exporting {
        provider: SdkTracerProvider,
        tracer: SdkTracer,
    }

    impl Exporting {
        /// On the current tokio runtime (the exporter's channel runs there).
        pub(crate) fn start(endpoint: &str) -> Result<Exporting, Error> {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .with_timeout(Duration::from_secs(5))
                .build()
                .map_err(|e| Error::invalid("otlp", format!("cannot export to {endpoint}: {e}")))?;
            let batches = BatchSpanProcessor::builder(exporter)
                .with_batch_config(
                    BatchConfigBuilder::default()
                        .with_scheduled_delay(Duration::from_millis(500))
                        .build(),
                )
                .build();
            let resource = opentelemetry_sdk::Resource::builder()
                .with_service_name("baton")
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build();
            let provider = SdkTracerProvider::builder()
                .with_resource(resource)
                .with_span_processor(batches)
                .build();
            let tracer = provider.tracer("baton");
            Ok(Exporting { provider, tracer })
        }

        fn parent(traceparent: Option<&str>) -> opentelemetry::Context {
            let mut carrier = HashMap::new();
            if let Some(t) = traceparent {
                carrier.insert("traceparent".to_owned(), t.to_owned());
            }
            TraceContextPropagator::new().extract(&carrier)
        }

        pub(crate) fn request(
            &self,
            method: &str,
            route: &str,
            status: u16,
            traceparent: Option<&str>,
            started: SystemTime,
        ) {
            let mut span = self
                .tracer
                .span_builder(format!("{method} {route}"))
                .with_kind(SpanKind::Server)
                .with_start_time(started)
                .with_attributes(vec![
                    KeyValue::new("http.request.method", method.to_owned()),
                    KeyValue::new("http.route", route.to_owned()),
                    KeyValue::new("http.response.status_code", i64::from(status)),
                ])
                .start_with_context(&self.tracer, &Self::parent(traceparent));
            if status >= 500 {
                span.set_status(Status::error(format!("answered {status}")));
            }
            span.end();
        }

        pub(crate) fn decided(&self, d: &Decision, kind: RequestKind, task: &TaskId) {
            let Some(traceparent) = traceparent_of(d) else {
                return;
            };
            let (outcome, fence) = outcome_of(d);
            let mut attributes = vec![
                KeyValue::new("baton.task", task.to_string()),
                KeyValue::new("baton.request", kind.as_str().to_owned()),
                KeyValue::new("baton.outcome", outcome),
            ];
            if let Some(f) = fence {
                attributes.push(KeyValue::new(
                    "baton.fence",
                    i64::try_from(f).unwrap_or(i64::MAX),
                ));
            }
            self.tracer
                .span_builder(format!("baton {}", kind.as_str()))
                .with_kind(SpanKind::Internal)
                .with_attributes(attributes)
                .start_with_context(&self.tracer, &Self::parent(Some(traceparent)))
                .end();
        }

        /// Exports what is left; waits for the exporter off the runtime's
        /// threads (the SDK's shutdown blocks).
        pub(crate) async fn stop(&self) {
            let provider = self.provider.clone();
            let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        }
    }
}

/// The server's spans: exported, or none.
pub(crate) struct Spans {
    #[cfg(feature = "otlp")]
    exporting: Option<otlp::Exporting>,
}

impl std::fmt::Debug for Spans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Spans")
    }
}

impl Spans {
    pub(crate) fn none() -> Spans {
        Spans {
            #[cfg(feature = "otlp")]
            exporting: None,
        }
    }

    /// Whether spans can go to `endpoint`: an `http://` or `https://` URL
    /// with a host, in a build with the `otlp` feature.
    pub(crate) fn check(endpoint: &str) -> Result<(), Error> {
        if !cfg!(feature = "otlp") {
            return Err(Error::unsupported(format!(
                "--otlp {endpoint}: spans need baton built with the `otlp` feature (cargo build -p baton-cli --features otlp)"
            )));
        }
        let uri: hyper::Uri = endpoint.parse().map_err(|e| {
            Error::invalid(
                "otlp",
                format!("must be a collector's URL, http://HOST:PORT: {e}"),
            )
        })?;
        match (uri.scheme_str(), uri.host()) {
            (Some("http" | "https"), Some(_)) => Ok(()),
            _ => Err(Error::invalid(
                "otlp",
                format!("must be a collector's URL, http://HOST:PORT (got {endpoint:?})"),
            )),
        }
    }

    /// Exports to the OTLP gRPC `endpoint` (`http://HOST:4317`), or
    /// refuses naming the feature a build without it lacks.
    pub(crate) fn to(endpoint: Option<&str>) -> Result<Spans, Error> {
        let Some(endpoint) = endpoint else {
            return Ok(Spans::none());
        };
        Self::check(endpoint)?;
        #[cfg(feature = "otlp")]
        {
            Ok(Spans {
                exporting: Some(otlp::Exporting::start(endpoint)?),
            })
        }
        #[cfg(not(feature = "otlp"))]
        {
            Ok(Spans::none())
        }
    }

    /// A request answered: `traceparent` the caller's header, if any.
    pub(crate) fn request(
        &self,
        method: &str,
        route: &str,
        status: u16,
        traceparent: Option<&str>,
        started: SystemTime,
    ) {
        #[cfg(feature = "otlp")]
        if let Some(e) = &self.exporting {
            e.request(method, route, status, traceparent, started);
        }
        #[cfg(not(feature = "otlp"))]
        let _ = (method, route, status, traceparent, started);
    }

    /// A decision on `task`, spanned when its task carries a trace context.
    pub(crate) fn decided(&self, d: &Decision, kind: RequestKind, task: &TaskId) {
        #[cfg(feature = "otlp")]
        if let Some(e) = &self.exporting {
            e.decided(d, kind, task);
        }
        #[cfg(not(feature = "otlp"))]
        let _ = (d, kind, task, traceparent_of, outcome_of);
    }

    /// Exports the spans not yet exported.
    pub(crate) async fn stop(&self) {
        #[cfg(feature = "otlp")]
        if let Some(e) = &self.exporting {
            e.stop().await;
        }
    }
}

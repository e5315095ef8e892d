//! What the status page and `/metrics` show of the webhook deliverer
//! (`deliver.rs`), kept in the server's state.

use baton_core::delivery::{Deliveries, DeliveryPolicy};

/// What the status page shows of the deliverer.
#[derive(Debug, Default)]
pub(crate) struct DeliveryStatus {
    pub url: String,
    pub state: Deliveries,
    pub error: Option<String>,
}

impl DeliveryStatus {
    pub(crate) fn new(url: &str, policy: DeliveryPolicy) -> DeliveryStatus {
        DeliveryStatus {
            url: url.to_owned(),
            state: Deliveries::new(policy),
            error: None,
        }
    }

    pub(crate) fn view(&self) -> serde_json::Value {
        let mut v = self.state.view();
        v["url"] = serde_json::json!(self.url);
        v["error"] = serde_json::json!(self.error);
        v
    }
}

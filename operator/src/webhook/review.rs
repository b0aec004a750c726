//! What both webhook handlers share: the state they answer from ([`Hook`]), the leader's
//! part of it ([`LeaderView`]), and decoding and encoding AdmissionReviews.

use std::sync::{Arc, RwLock};

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::Client;

use super::eviction::Grants;
use crate::caches::reflectors::Caches;
use crate::telemetry::metrics::Metrics;

/// What only the leader holds, for the zone-disruption webhook: its term's ledger of the
/// evictions it allowed. Only the leader decides evictions, from that one memory, so two
/// replicas never allow two zones at once; the ledger goes when the term ends.
#[derive(Clone, Default)]
pub struct LeaderView(Arc<RwLock<Option<Arc<Grants>>>>);

impl LeaderView {
    /// Set by a term when it starts; the term's caches are synced by then.
    pub fn lead(&self, grants: Arc<Grants>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(grants);
    }

    pub fn step_down(&self) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The ledger, while this replica leads.
    pub(super) fn grants(&self) -> Option<Arc<Grants>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The state the handlers answer from: the process's shared caches (nodes, zone-aware
/// pods, LokiStacks, volumes), read by every replica, leader or not.
#[derive(Clone)]
pub(super) struct Hook {
    pub(super) caches: Caches,
    pub(super) client: Client,
    pub(super) metrics: Arc<Metrics>,
    pub(super) leader: LeaderView,
}

/// The request of an AdmissionReview, or the response for a body that is not one.
pub(super) fn request<T>(body: &[u8]) -> Result<AdmissionRequest<T>, Box<Response>>
where
    T: kube::Resource + serde::de::DeserializeOwned,
{
    let review: AdmissionReview<T> = serde_json::from_slice(body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("not an AdmissionReview: {e}"),
        )
            .into_response()
    })?;
    review
        .try_into()
        .map_err(|e| Box::new(reply(AdmissionResponse::invalid(e))))
}

pub(super) fn reply(response: AdmissionResponse) -> Response {
    match serde_json::to_vec(&response.into_review()) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

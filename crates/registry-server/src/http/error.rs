//! Every API error as one JSON shape: `{"error": {"code": "...", "message": "..."}}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to an API client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 404 `not_found`: unknown route, unknown collection, unknown id, an id outside its
    /// collection's grammar, or too many path segments.
    #[error("{0}")]
    NotFound(String),
    /// 400 `bad_request`: an unknown or repeated query parameter, a bad filter value.
    #[error("{0}")]
    BadRequest(String),
    /// 405 `method_not_allowed`: anything but GET and HEAD.
    #[error("method {0} not allowed: this API is read-only (GET and HEAD)")]
    MethodNotAllowed(String),
    /// 414 `uri_too_long`: a path or query string over the limits.
    #[error("{0}")]
    UriTooLong(String),
    /// 503 `busy`: no page-rendering slot within [`crate::http::PAGE_QUEUE_TIMEOUT`].
    #[error("{0}")]
    Busy(String),
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::UriTooLong(_) => StatusCode::URI_TOO_LONG,
            ApiError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The machine-readable `error.code`.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::NotFound(_) => "not_found",
            ApiError::BadRequest(_) => "bad_request",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::UriTooLong(_) => "uri_too_long",
            ApiError::Busy(_) => "busy",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"code": self.code(), "message": self.to_string()}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (
            self.status(),
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            self.body().to_string(),
        )
            .into_response();
        if matches!(self, ApiError::MethodNotAllowed(_)) {
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        }
        r
    }
}

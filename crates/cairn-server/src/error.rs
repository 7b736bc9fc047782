//! The server's error answers: a status and a typed body ([`crate::wire::ErrorBody`]) with a
//! stable code, in the encoding the client asked for.
//!
//! Owns: [`ApiError`], the codes (`docs/server.md`, "Errors"), and how ledger errors map to
//! them. May call: `wire`, `codec`, the ledger's error type. Must never touch: the ledger.
//!
//! No secret reaches a message: a token is never echoed, and an internal failure's detail is
//! logged with the request's id and answered as `internal` without it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::codec::{Format, Reply};
use crate::wire::ErrorBody;

/// An error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable code.
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
    /// The encoding of the body.
    pub format: Format,
    /// For a 421 `not_leader`: the leader's API base URL, sent in the `cairn-leader` header.
    pub leader: Option<String>,
}

impl ApiError {
    /// An error with `status` and `code`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            format: Format::Json,
            leader: None,
        }
    }

    /// 400 `bad_request`: a body or parameter the server cannot use.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 401 `unauthenticated`: no token, or one the server does not know.
    pub fn unauthenticated() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "a bearer token is required (Authorization: Bearer <token>)",
        )
    }

    /// 403 `forbidden`: the token lacks the grant.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 413 `too_large`: a body over the limit, or too many keys in one request.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
    }

    /// 500 `internal`: the detail is logged, not answered.
    pub fn internal() -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the server failed; its log says why",
        )
    }

    /// The same error, encoded as `format`.
    pub fn in_format(mut self, format: Format) -> ApiError {
        self.format = format;
        self
    }
}

impl From<cairn_ledger::Error> for ApiError {
    fn from(e: cairn_ledger::Error) -> ApiError {
        use cairn_ledger::Error as E;
        match &e {
            E::NoSuchTable(_) => ApiError::not_found(e.to_string()),
            E::NoSuchVersion { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "no_such_version", e.to_string())
            }
            E::VersionPruned { .. } => {
                ApiError::new(StatusCode::GONE, "version_pruned", e.to_string())
            }
            E::RangeTooLarge { .. } => ApiError::too_large(format!(
                "{e}: the server's keys_per_request; ask a narrower range"
            )),
            E::InvalidConfig(_) | E::MetaTooLong(_) | E::Prove(_) => {
                ApiError::bad_request(e.to_string())
            }
            E::Engine(inner) if inner.is_retryable() => {
                ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
            E::Engine(
                cairn::Error::KeyTooLarge { .. }
                | cairn::Error::ValueTooLarge { .. }
                | cairn::Error::InvalidConfig(_),
            ) => ApiError::bad_request(e.to_string()),
            E::Broken(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "broken",
                "the ledger is broken by a failed commit and must be reopened",
            ),
            _ => {
                tracing::error!(error = %e, "ledger operation failed");
                ApiError::internal()
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.code.to_string(),
            message: self.message,
        };
        let leader = self
            .leader
            .and_then(|l| axum::http::HeaderValue::from_str(&l).ok());
        let mut response = Reply(body, self.format).into_response();
        if let Some(leader) = leader {
            response.headers_mut().insert("cairn-leader", leader);
        }
        *response.status_mut() = self.status;
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

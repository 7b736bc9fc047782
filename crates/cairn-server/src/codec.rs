//! Content negotiation: request bodies decoded from JSON or protobuf by their `Content-Type`,
//! answers encoded as the request's `Accept` (or its `Content-Type`) asks.
//!
//! Owns: [`Format`], the [`Wire`] extractor and the [`Reply`] answer. May call: `wire`,
//! `error`, `axum`. Must never touch: the ledger.
//!
//! Bounds: a body is read whole, up to the server's body limit (axum's `DefaultBodyLimit`,
//! which answers 413 beyond it), then decoded once; decoding is total (an error, never a
//! panic, on any bytes).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// The media type of protobuf bodies.
pub const PROTOBUF: &str = "application/x-protobuf";
/// The media type of JSON bodies.
pub const JSON: &str = "application/json";

/// A body encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `application/json`.
    Json,
    /// `application/x-protobuf` (also accepted as `application/protobuf`).
    Protobuf,
}

impl Format {
    /// The format a media type names (parameters ignored), if any.
    fn of(media: &str) -> Option<Format> {
        let essence = media.split(';').next().unwrap_or("").trim();
        if essence.eq_ignore_ascii_case(JSON) {
            Some(Format::Json)
        } else if essence.eq_ignore_ascii_case(PROTOBUF)
            || essence.eq_ignore_ascii_case("application/protobuf")
        {
            Some(Format::Protobuf)
        } else {
            None
        }
    }

    /// The request body's format: its `Content-Type` (JSON when it has none). Errors: 415
    /// for another type.
    pub fn of_body(headers: &HeaderMap) -> Result<Format, ApiError> {
        match headers.get(header::CONTENT_TYPE) {
            None => Ok(Format::Json),
            Some(v) => v.to_str().ok().and_then(Format::of).ok_or_else(|| {
                ApiError::new(
                    axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    format!("bodies are {JSON} or {PROTOBUF}"),
                )
            }),
        }
    }

    /// The answer's format: the first of JSON and protobuf that `Accept` names, else the
    /// request body's format, else JSON.
    pub fn of_answer(headers: &HeaderMap) -> Format {
        let accepted = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .find_map(Format::of);
        accepted
            .or_else(|| {
                headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(Format::of)
            })
            .unwrap_or(Format::Json)
    }

    /// The `Content-Type` of this format.
    pub fn media(self) -> &'static str {
        match self {
            Format::Json => JSON,
            Format::Protobuf => PROTOBUF,
        }
    }

    /// Decodes a message. Errors: 400 with the decoder's reason.
    pub fn decode<T>(self, bytes: &[u8]) -> Result<T, ApiError>
    where
        T: prost::Message + Default + serde::de::DeserializeOwned,
    {
        match self {
            Format::Json => serde_json::from_slice(bytes)
                .map_err(|e| ApiError::bad_request(format!("the JSON body does not decode: {e}"))),
            Format::Protobuf => T::decode(bytes).map_err(|e| {
                ApiError::bad_request(format!("the protobuf body does not decode: {e}"))
            }),
        }
    }

    /// Encodes a message.
    pub fn encode<T: prost::Message + serde::Serialize>(self, message: &T) -> Vec<u8> {
        match self {
            // Serializing these messages (strings, numbers, lists) cannot fail.
            Format::Json => serde_json::to_vec(message).unwrap_or_default(),
            Format::Protobuf => message.encode_to_vec(),
        }
    }
}

/// A request body decoded by its `Content-Type`, with the format the answer should take.
pub struct Wire<T> {
    /// The message.
    pub message: T,
    /// The answer's format.
    pub answer: Format,
}

impl<T, S> FromRequest<S> for Wire<T>
where
    T: prost::Message + Default + serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let answer = Format::of_answer(req.headers());
        let body = Format::of_body(req.headers()).map_err(|e| e.in_format(answer))?;
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            let status = rejection.status();
            let e = if status == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large("the body is larger than the server's limit")
            } else {
                ApiError::new(status, "bad_request", rejection.body_text())
            };
            e.in_format(answer)
        })?;
        let message = body.decode(&bytes).map_err(|e| e.in_format(answer))?;
        Ok(Wire { message, answer })
    }
}

/// An answer: a message in a format.
pub struct Reply<T>(pub T, pub Format);

impl<T: prost::Message + serde::Serialize> IntoResponse for Reply<T> {
    fn into_response(self) -> Response {
        let bytes = self.1.encode(&self.0);
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(self.1.media()),
            )],
            bytes,
        )
            .into_response()
    }
}

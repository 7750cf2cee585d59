//! The one place where a failure of the rewriting path becomes a response: a Kubernetes
//! `Status` with the right code and reason.

use std::time::Duration;

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use crate::body::{self, Body, BoxError};

/// Why a request could not be rewritten or forwarded.
///
/// Every variant answers the client with a Kubernetes `Status` ([`Error::into_response`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request body (declared or read) is over the limit: 413.
    #[error("the request body is larger than {limit} bytes")]
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The request body could not be read from the client: 400.
    #[error("reading the request body: {0}")]
    ReadBody(#[source] BoxError),
    /// A `Content-Encoding` other than identity on a body that must be rewritten: 415.
    #[error("encoded request bodies are not supported for resources the rules rewrite")]
    EncodedBody,
    /// A media type the rules cannot rewrite for this resource (protobuf of a renamed kind): 415.
    #[error("the media type {media_type:?} is not supported for {resource}")]
    UnsupportedMediaType {
        /// The request's media type.
        media_type: String,
        /// The resource (original names).
        resource: String,
    },
    /// The client accepts only CBOR for a resource whose bodies are rewritten as JSON: 406.
    #[error("the proxy serves {resource} as JSON only; {accept:?} does not accept application/json")]
    NotAcceptable {
        /// The client's `Accept`.
        accept: String,
        /// The resource (original names).
        resource: String,
    },
    /// A body the rules cannot rewrite (malformed JSON or YAML, a bad patch): 400.
    #[error("the request body cannot be rewritten: {0}")]
    Body(#[source] kube_api_rewriter::Error),
    /// The rewritten path makes no URI: 400.
    #[error("invalid path: {0}")]
    InvalidPath(String),
    /// Nothing is served at this path: 404.
    #[error("the server could not find the requested resource: {0}")]
    NotFound(String),
    /// Upstream could not be reached or failed the request: 503.
    #[error("upstream is unavailable: {0}")]
    Unavailable(String),
    /// Upstream sent no response head in time: 504.
    #[error("upstream did not answer within {0:?}")]
    Timeout(Duration),
    /// A response to be read whole is larger than the limit (or its gzip inflates past it):
    /// 502.
    #[error("the response from upstream is larger than {limit} bytes")]
    ResponseTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// A single LIST item or WATCH event is larger than the limit: 502 (for a watch, the
    /// `Status` of an `ERROR` event).
    #[error("a single item or event from upstream is larger than {limit} bytes")]
    ItemTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// Upstream answered an upgrade request too late: 504.
    #[error("upstream did not answer the upgrade in time")]
    UpgradeTimeout,
    /// A response the client asked for as YAML could not be read whole or converted: 502.
    #[error("the response cannot be served as YAML: {0}")]
    Yaml(String),
}

impl Error {
    /// The HTTP status code of the `Status` answer.
    pub fn status_code(&self) -> StatusCode {
        match self {
            Error::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::ReadBody(_) | Error::Body(_) | Error::InvalidPath(_) => StatusCode::BAD_REQUEST,
            Error::EncodedBody | Error::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::NotAcceptable { .. } => StatusCode::NOT_ACCEPTABLE,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Timeout(_) | Error::UpgradeTimeout => StatusCode::GATEWAY_TIMEOUT,
            Error::ResponseTooLarge { .. } | Error::ItemTooLarge { .. } | Error::Yaml(_) => {
                StatusCode::BAD_GATEWAY
            }
        }
    }

    /// The `reason` of the `Status` answer (Kubernetes' `StatusReason`).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::BodyTooLarge { .. } => "RequestEntityTooLarge",
            Error::ReadBody(_) | Error::Body(_) | Error::InvalidPath(_) => "BadRequest",
            Error::EncodedBody | Error::UnsupportedMediaType { .. } => "UnsupportedMediaType",
            Error::NotAcceptable { .. } => "NotAcceptable",
            Error::NotFound(_) => "NotFound",
            Error::Unavailable(_) => "ServiceUnavailable",
            Error::Timeout(_) | Error::UpgradeTimeout => "Timeout",
            Error::ResponseTooLarge { .. } | Error::ItemTooLarge { .. } | Error::Yaml(_) => "InternalError",
        }
    }

    /// The Kubernetes `Status` response for this error.
    pub fn into_response(self) -> Response<Body> {
        status(self.status_code(), self.reason(), &self.to_string())
    }

    /// This error as a watch `ERROR` event carrying its `Status`, newline-terminated.
    pub fn watch_event(&self) -> Vec<u8> {
        let status = kube_api_rewriter::status_json(
            self.status_code().as_u16(),
            self.reason(),
            &self.to_string(),
            None,
        );
        let mut ev = br#"{"type":"ERROR","object":"#.to_vec();
        ev.extend_from_slice(&status);
        ev.extend_from_slice(b"}\n");
        ev
    }
}

impl From<kube_api_rewriter::Error> for Error {
    fn from(e: kube_api_rewriter::Error) -> Self {
        Error::Body(e)
    }
}

/// A Kubernetes `Status` failure response.
pub(crate) fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let json = kube_api_rewriter::status_json(code.as_u16(), reason, message, None);
    let mut r = Response::new(body::full(json));
    *r.status_mut() = code;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn errors_become_kubernetes_status_responses() {
        let r = Error::BodyTooLarge { limit: 10 }.into_response();
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
        let b = r.into_body().collect().await.expect("body").to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&b).expect("json");
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["code"], 413);
        assert_eq!(v["reason"], "RequestEntityTooLarge");
        assert_eq!(v["message"], "the request body is larger than 10 bytes");
    }

    #[test]
    fn a_watch_error_event_carries_the_status() {
        let ev = Error::ItemTooLarge { limit: 5 }.watch_event();
        assert!(ev.ends_with(b"}\n"));
        let v: serde_json::Value = serde_json::from_slice(&ev).expect("json");
        assert_eq!(v["type"], "ERROR");
        assert_eq!(v["object"]["kind"], "Status");
        assert_eq!(v["object"]["code"], 502);
        assert_eq!(
            v["object"]["message"],
            "a single item or event from upstream is larger than 5 bytes"
        );
    }

    #[test]
    fn codes_and_reasons() {
        let cases = [
            (Error::EncodedBody, 415, "UnsupportedMediaType"),
            (Error::InvalidPath("x".into()), 400, "BadRequest"),
            (Error::Unavailable("refused".into()), 503, "ServiceUnavailable"),
            (Error::Timeout(Duration::from_secs(1)), 504, "Timeout"),
            (Error::ItemTooLarge { limit: 1 }, 502, "InternalError"),
            (Error::NotFound("/x".into()), 404, "NotFound"),
            (Error::ResponseTooLarge { limit: 1 }, 502, "InternalError"),
            (Error::Yaml("x".into()), 502, "InternalError"),
        ];
        for (e, code, reason) in cases {
            assert_eq!((e.status_code().as_u16(), e.reason()), (code, reason), "{e}");
        }
    }
}

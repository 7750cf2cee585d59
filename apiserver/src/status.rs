//! The one place that turns errors into Kubernetes `Status` responses, and the JSON response
//! helpers.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, combinators::BoxBody};
use serde_json::{Value, json};

use crate::error::Error;

/// The body type of every response.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// A body of bytes.
pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

/// An empty body.
pub fn empty() -> Body {
    full(Bytes::new())
}

/// A `200 application/json` response.
pub fn json(v: &Value) -> Response<Body> {
    with_type(StatusCode::OK, "application/json", v.to_string())
}

/// A `200 text/plain` response.
pub fn text(s: &'static str) -> Response<Body> {
    with_type(StatusCode::OK, "text/plain; charset=utf-8", s)
}

fn with_type(code: StatusCode, ctype: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = code;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    r
}

/// The HTTP code and `reason` of an error.
pub fn code_and_reason(e: &Error) -> (StatusCode, &'static str) {
    match e {
        Error::BadRequest(_) | Error::Flag { .. } => (StatusCode::BAD_REQUEST, "BadRequest"),
        Error::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "Unauthorized"),
        Error::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden"),
        Error::NotFound { .. } => (StatusCode::NOT_FOUND, "NotFound"),
        Error::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        Error::Conflict(_) => (StatusCode::CONFLICT, "Conflict"),
        Error::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge"),
        Error::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
        Error::Internal(_) | Error::Tls { .. } | Error::AuthConfig(_) | Error::Kube(_) | Error::Io(_) => {
            (StatusCode::INTERNAL_SERVER_ERROR, "InternalError")
        }
    }
}

/// The `Status` object of an error.
pub fn status_object(e: &Error) -> Value {
    let (code, reason) = code_and_reason(e);
    let mut s = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": e.to_string(),
        "reason": reason,
        "code": code.as_u16(),
    });
    if let Error::NotFound { kind, name, .. } = e
        && !kind.is_empty()
    {
        s["details"] = json!({
            "name": name,
            "group": "virtualization.deckhouse.io",
            "kind": kind,
        });
    }
    s
}

/// The response for an error.
pub fn error_response(e: &Error) -> Response<Body> {
    let (code, _) = code_and_reason(e);
    with_type(code, "application/json", status_object(e).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_the_vm() {
        let e = Error::NotFound {
            message: "virtualmachines.virtualization.deckhouse.io \"vm1\" not found".into(),
            kind: "virtualmachines",
            name: "vm1".into(),
        };
        let s = status_object(&e);
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["details"]["name"], "vm1");
        assert_eq!(s["kind"], "Status");
        assert_eq!(error_response(&e).status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn codes_follow_the_kind_of_error() {
        let cases = [
            (Error::BadRequest("x".into()), 400),
            (Error::Unauthorized("x".into()), 401),
            (Error::Forbidden("x".into()), 403),
            (Error::no_route(), 404),
            (Error::MethodNotAllowed, 405),
            (Error::Conflict("x".into()), 409),
            (Error::PayloadTooLarge(1), 413),
            (Error::Unavailable("x".into()), 503),
            (Error::Internal("x".into()), 500),
        ];
        for (e, code) in cases {
            let s = status_object(&e);
            assert_eq!(s["code"], code, "{e:?}");
            assert_eq!(s["status"], "Failure");
            assert!(s.get("details").is_none(), "{e:?}");
        }
        assert_eq!(
            status_object(&Error::Unavailable("dial tcp: refused".into()))["message"],
            "error trying to reach service: dial tcp: refused"
        );
    }
}

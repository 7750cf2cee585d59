//! The one error type of the library: every failure a request or the start-up can meet.

/// What went wrong; [`crate::status`] turns it into a Kubernetes `Status` response.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed (bad options, a stream request without upgrade): 400.
    #[error("{0}")]
    BadRequest(String),
    /// No valid front-proxy certificate or no user: 401.
    #[error("{0}")]
    Unauthorized(String),
    /// The SubjectAccessReview denied the request: 403.
    #[error("{0}")]
    Forbidden(String),
    /// Nothing is served at this path, or the VM does not exist: 404.
    #[error("{message}")]
    NotFound {
        /// The message.
        message: String,
        /// The resource kind's plural, for `details.kind`.
        kind: &'static str,
        /// The object's name, for `details.name`.
        name: String,
    },
    /// The method is not served on this path: 405.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// The VM is in the wrong phase: 409.
    #[error("{0}")]
    Conflict(String),
    /// The request body is larger than the limit: 413.
    #[error("the request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// virt-api cannot be reached, refuses us, or does not answer: 503.
    #[error("error trying to reach service: {0}")]
    Unavailable(String),
    /// An unexpected failure (kube-apiserver not answering a review): 500.
    #[error("{0}")]
    Internal(String),
    /// A certificate, key or CA bundle cannot be used (start-up).
    #[error(transparent)]
    Tls(#[from] kube_api_rewriter_tls::Error),
    /// The front-proxy configuration in `kube-system/extension-apiserver-authentication` is unusable.
    #[error("extension-apiserver-authentication: {0}")]
    AuthConfig(String),
    /// A flag has a value that cannot work.
    #[error("flag {flag}: {message}")]
    Flag {
        /// The flag.
        flag: &'static str,
        /// Why.
        message: String,
    },
    /// A Kubernetes API call of our own failed (start-up).
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// Binding or another socket operation failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// A 404 for a path nothing is served at.
    pub fn no_route() -> Error {
        Error::NotFound {
            message: "the server could not find the requested resource".into(),
            kind: "",
            name: String::new(),
        }
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

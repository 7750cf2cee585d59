//! The library's error type.

use std::fmt;

/// Invalid JSON, with the byte offset where it went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// Byte offset into the input.
    pub(crate) offset: usize,
    /// What is wrong.
    pub(crate) msg: &'static str,
    /// True when the input ended early (a stream may still bring the rest).
    pub(crate) eof: bool,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid JSON at byte {}: {}", self.offset, self.msg)
    }
}

impl std::error::Error for JsonError {}

/// Everything that can go wrong in the rewriter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rule file is invalid.
    #[error("{file}:{line}:{column}: {message}")]
    Rules {
        /// File name as given.
        file: String,
        /// 1-based line (0 when unknown).
        line: u64,
        /// 1-based column (0 when unknown).
        column: u64,
        /// What is wrong.
        message: String,
    },
    /// A body is not valid JSON.
    #[error(transparent)]
    Json(#[from] JsonError),
    /// A YAML body (server-side apply) could not be read.
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// A body is of a type the rewriter cannot rewrite although rules apply to it.
    #[error("unsupported media type {0:?} for a resource the rules rewrite")]
    UnsupportedMediaType(String),
    /// A patch is malformed.
    #[error("invalid patch: {0}")]
    Patch(String),
    /// A URL could not be parsed.
    #[error("invalid path: {0}")]
    Path(String),
    /// An OpenAPI document (protobuf) could not be read.
    #[error("{0}")]
    OpenApi(String),
    /// A base64 field (admission patches) could not be decoded.
    #[error("invalid base64 in {field}: {source}")]
    Base64 {
        /// Which field.
        field: &'static str,
        /// Decoder error.
        #[source]
        source: base64::DecodeError,
    },
}

impl Error {
    /// Byte offset of a JSON error, if this is one.
    pub fn offset(&self) -> Option<usize> {
        match self {
            Error::Json(e) => Some(e.offset),
            _ => None,
        }
    }

    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Rules { .. } => "rules",
            Error::Json(_) => "json",
            Error::Yaml(_) => "yaml",
            Error::UnsupportedMediaType(_) => "media_type",
            Error::Patch(_) => "patch",
            Error::Path(_) => "path",
            Error::Base64 { .. } => "base64",
            Error::OpenApi(_) => "openapi",
        }
    }
}

/// Result with the library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

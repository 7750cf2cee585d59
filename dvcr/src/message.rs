//! The termination message: one JSON line the importer leaves in
//! `TERMINATION_MESSAGE_PATH`, which kubelet keeps (up to 4096 bytes) in the Pod's status and
//! the controller reads back.

use serde::{Deserialize, Serialize};

/// What an import or upload stored, or why it failed (then only [`TerminationMessage::error`]
/// is set). Serialized in camelCase; absent fields are left out, so a failure parses too.
///
/// ```
/// use virtualization_dvcr::TerminationMessage;
///
/// let m: TerminationMessage = serde_json::from_str(r#"{"error":"boom"}"#).unwrap();
/// assert_eq!(m.error.as_deref(), Some("boom"));
/// assert_eq!(m.format, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminationMessage {
    /// The stored format: `qcow2`, `raw` or `iso` (a directory destination holds `raw` or `iso`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// The format of the fetched or uploaded file (`raw`, `qcow2`, `vmdk`, `iso`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_format: Option<String>,
    /// Bytes of the stored disk file (for a registry destination: of the layer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_size: Option<u64>,
    /// The image's virtual size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unpacked_size: Option<u64>,
    /// SHA-256 (hex) of the stored disk file; for a registry destination, of the file in the
    /// layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The manifest digest (`sha256:...`), registry destination only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Bytes per second of the fetch (or of the upload's body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub average_speed: Option<u64>,
    /// Why the import failed (set only on failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Kubelet keeps this many bytes of a termination message.
const LIMIT: usize = 4096;

impl TerminationMessage {
    /// A failure message.
    ///
    /// ```
    /// let m = virtualization_dvcr::TerminationMessage::failure("boom");
    /// assert_eq!(m.to_line(), r#"{"error":"boom"}"#);
    /// ```
    pub fn failure(error: impl Into<String>) -> Self {
        TerminationMessage {
            error: Some(error.into()),
            ..Default::default()
        }
    }

    /// The message as one JSON line, cut to what kubelet keeps (a long error is shortened).
    pub fn to_line(&self) -> String {
        let line = serde_json::to_string(self).unwrap_or_default();
        if line.len() <= LIMIT {
            return line;
        }
        let mut m = self.clone();
        if let Some(e) = &mut m.error {
            let mut keep = LIMIT.saturating_sub(line.len() - e.len() + 64).min(e.len());
            while !e.is_char_boundary(keep) {
                keep -= 1;
            }
            e.truncate(keep);
            e.push_str("...");
        }
        serde_json::to_string(&m).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_round_trips_in_camel_case() {
        let m = TerminationMessage {
            format: Some("qcow2".into()),
            source_format: Some("raw".into()),
            stored_size: Some(10),
            unpacked_size: Some(20),
            sha256: Some("ab".into()),
            digest: Some("sha256:cd".into()),
            average_speed: Some(5),
            error: None,
        };
        let line = m.to_line();
        assert!(line.contains(r#""sourceFormat":"raw""#), "{line}");
        assert!(line.contains(r#""averageSpeed":5"#), "{line}");
        assert!(!line.contains("error"), "{line}");
        assert_eq!(serde_json::from_str::<TerminationMessage>(&line).unwrap(), m);
    }

    #[test]
    fn long_errors_are_cut_to_fit() {
        let m = TerminationMessage::failure("é".repeat(5000));
        let line = m.to_line();
        assert!(line.len() <= LIMIT, "{}", line.len());
        assert!(serde_json::from_str::<TerminationMessage>(&line).is_ok());
    }
}

//! Certificates for the tests, made with openssl: self-signed, CAs, and certificates a CA
//! signs.

use std::path::{Path, PathBuf};

use crate::openssl;

/// Writes a self-signed EC certificate for `cn` (valid for 127.0.0.1 and localhost) and its key.
pub fn self_signed_cert(crt: &Path, key: &Path, cn: &str) {
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "1",
        "-subj",
        &format!("/CN={cn}"),
        "-addext",
        "subjectAltName=IP:127.0.0.1,DNS:localhost",
        "-keyout",
        key.to_str().expect("utf-8"),
        "-out",
        crt.to_str().expect("utf-8"),
    ]);
}

/// Writes a CA (self-signed, RSA 2048) as `ca.crt`/`ca.key` in `dir`, named `cn`.
pub fn make_ca(dir: &Path, cn: &str) -> (PathBuf, PathBuf) {
    let crt = dir.join(format!("{cn}.crt"));
    let key = dir.join(format!("{cn}.key"));
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        &format!("/CN={cn}"),
        "-keyout",
        key.to_str().expect("utf-8"),
        "-out",
        crt.to_str().expect("utf-8"),
    ]);
    (crt, key)
}

/// Writes `DIR/NAME.crt` and `DIR/NAME.key`, a certificate for `cn` signed by the CA
/// `ca_crt`/`ca_key`: a server certificate for the comma-separated `san` entries
/// (`DNS:x,IP:y`) when given, else a client certificate.
pub fn signed_cert(
    dir: &Path,
    name: &str,
    cn: &str,
    san: Option<&str>,
    ca_crt: &Path,
    ca_key: &Path,
) -> (PathBuf, PathBuf) {
    let crt = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let csr = dir.join(format!("{name}.csr"));
    let ext = dir.join(format!("{name}.ext"));
    let text = match san {
        Some(san) => format!(
            "subjectAltName={san}\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        ),
        None => {
            "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n".to_owned()
        }
    };
    std::fs::write(&ext, text).expect("write ext");
    let s = |p: &Path| p.to_str().expect("utf-8").to_owned();
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        &format!("/CN={cn}"),
        "-keyout",
        &s(&key),
        "-out",
        &s(&csr),
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &s(&csr),
        "-CA",
        &s(ca_crt),
        "-CAkey",
        &s(ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &s(&ext),
        "-out",
        &s(&crt),
    ]);
    (crt, key)
}

//! The control plane's certificates and keys in `DIR/pki`, made with rcgen (ECDSA P-256 keys
//! through ring), valid for ten years:
//!
//! - `ca.crt`/`ca.key`: the serving CA (`CN=kar-local-ca`), in every kubeconfig;
//! - `apiserver.crt`/`.key`: kube-apiserver's serving certificate (`CN=kube-apiserver`,
//!   serverAuth, the names in [`APISERVER_SANS`]);
//! - `sa.key`/`sa.pub`: the service-account signing key;
//! - `front-proxy-ca.crt`/`.key` (`CN=front-proxy-ca`) and `front-proxy-client.crt`/`.key`
//!   (`CN=front-proxy-client`, clientAuth): what kube-apiserver shows aggregated API servers.
//!
//! Keys are `0600`, certificates and `sa.pub` `0644`. `DIR/pki/.complete` marks a finished set,
//! which later `up`s reuse.

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::error::{Error, Result};
use crate::process::write_atomic;

/// The subject alternative names of kube-apiserver's serving certificate.
pub const APISERVER_SANS: [&str; 7] = [
    "127.0.0.1",
    "10.0.0.1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

const VALIDITY_DAYS: i64 = 3650;

fn base(cn: &str) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    // A minute back, for clocks a little behind.
    p.not_before = time::OffsetDateTime::from_unix_timestamp(now - 60).unwrap_or(p.not_before);
    p.not_after =
        time::OffsetDateTime::from_unix_timestamp(now + VALIDITY_DAYS * 86_400).unwrap_or(p.not_after);
    p
}

/// A CA's parameters: `CN=cn`, CA:TRUE, for signing certificates.
pub fn ca_params(cn: &str) -> CertificateParams {
    let mut p = base(cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    p
}

/// kube-apiserver's serving certificate: `CN=kube-apiserver`, [`APISERVER_SANS`], serverAuth,
/// digitalSignature and keyEncipherment (critical).
pub fn apiserver_params() -> Result<CertificateParams> {
    let mut p = base("kube-apiserver");
    p.subject_alt_names = APISERVER_SANS
        .iter()
        .map(|s| match s.parse::<std::net::IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => (*s).try_into().map(SanType::DnsName),
        })
        .collect::<Result<_, _>>()
        .map_err(|cause| Error::Certificate {
            name: "apiserver",
            cause,
        })?;
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    Ok(p)
}

/// The front-proxy client certificate: `CN=front-proxy-client`, clientAuth.
pub fn front_proxy_client_params() -> CertificateParams {
    let mut p = base("front-proxy-client");
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p
}

fn key(name: &'static str) -> Result<KeyPair> {
    KeyPair::generate().map_err(|cause| Error::Certificate { name, cause })
}

fn save(pki: &Path, name: &str, cert_pem: &str, key: &KeyPair) -> Result<()> {
    write_atomic(&pki.join(format!("{name}.crt")), cert_pem.as_bytes(), Some(0o644))?;
    write_atomic(
        &pki.join(format!("{name}.key")),
        key.serialize_pem().as_bytes(),
        Some(0o600),
    )
}

/// Makes `DIR/pki` unless a complete set is there; says so in `log`.
pub fn ensure(dir: &Path, log: &mut dyn std::io::Write) -> Result<()> {
    let pki = dir.join("pki");
    if pki.join(".complete").exists() {
        return Ok(());
    }
    crate::process::say(log, &format!("generating certificates in {}", pki.display()));
    let _ = std::fs::remove_dir_all(&pki);
    let mkdir = || -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&pki)
    };
    mkdir().map_err(|e| Error::io(format!("creating {}", pki.display()), e))?;
    let cert_err = |name| move |cause| Error::Certificate { name, cause };

    // serving CA + kube-apiserver's serving certificate
    let ca_key = key("ca")?;
    let ca_p = ca_params("kar-local-ca");
    let ca = ca_p.self_signed(&ca_key).map_err(cert_err("ca"))?;
    save(&pki, "ca", &ca.pem(), &ca_key)?;
    let ca_issuer = Issuer::new(ca_p, ca_key);
    let api_key = key("apiserver")?;
    let api = apiserver_params()?
        .signed_by(&api_key, &ca_issuer)
        .map_err(cert_err("apiserver"))?;
    save(&pki, "apiserver", &api.pem(), &api_key)?;

    // service-account signing key
    let sa = key("sa")?;
    write_atomic(&pki.join("sa.key"), sa.serialize_pem().as_bytes(), Some(0o600))?;
    write_atomic(&pki.join("sa.pub"), sa.public_key_pem().as_bytes(), Some(0o644))?;

    // front-proxy CA + client certificate (kube-apiserver -> aggregated API servers)
    let fp_ca_key = key("front-proxy-ca")?;
    let fp_ca_params = ca_params("front-proxy-ca");
    let fp_ca = fp_ca_params
        .self_signed(&fp_ca_key)
        .map_err(cert_err("front-proxy-ca"))?;
    save(&pki, "front-proxy-ca", &fp_ca.pem(), &fp_ca_key)?;
    let fp_issuer = Issuer::new(fp_ca_params, fp_ca_key);
    let client_key = key("front-proxy-client")?;
    let client = front_proxy_client_params()
        .signed_by(&client_key, &fp_issuer)
        .map_err(cert_err("front-proxy-client"))?;
    save(&pki, "front-proxy-client", &client.pem(), &client_key)?;

    write_atomic(&pki.join(".complete"), b"", None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apiserver_names_and_usages() {
        let p = apiserver_params().unwrap();
        let names: Vec<String> = p
            .subject_alt_names
            .iter()
            .map(|s| match s {
                SanType::IpAddress(ip) => ip.to_string(),
                SanType::DnsName(n) => n.as_str().to_owned(),
                other => panic!("unexpected SAN {other:?}"),
            })
            .collect();
        assert_eq!(names, APISERVER_SANS);
        assert_eq!(p.extended_key_usages, [ExtendedKeyUsagePurpose::ServerAuth]);
        assert_eq!(p.is_ca, IsCa::NoCa);
        assert!(p.key_usages.contains(&KeyUsagePurpose::DigitalSignature));
    }

    #[test]
    fn front_proxy_client_is_a_client_certificate() {
        let p = front_proxy_client_params();
        assert_eq!(p.extended_key_usages, [ExtendedKeyUsagePurpose::ClientAuth]);
        assert!(p.subject_alt_names.is_empty());
        let cn = p.distinguished_name.get(&DnType::CommonName).unwrap();
        assert_eq!(cn, &rcgen::DnValue::Utf8String("front-proxy-client".into()));
    }

    #[test]
    fn ca_signs_and_lasts_ten_years() {
        let p = ca_params("kar-local-ca");
        assert!(matches!(p.is_ca, IsCa::Ca(_)));
        assert!(p.key_usages.contains(&KeyUsagePurpose::KeyCertSign));
        let days = (p.not_after - p.not_before).whole_days();
        assert!((3650..=3651).contains(&days), "{days}");
    }

    #[test]
    fn writes_a_complete_set_once() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("kar-env-pki-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut log = Vec::new();
        ensure(&dir, &mut log).unwrap();
        for f in [
            "ca.crt",
            "ca.key",
            "apiserver.crt",
            "apiserver.key",
            "sa.key",
            "sa.pub",
            "front-proxy-ca.crt",
            "front-proxy-ca.key",
            "front-proxy-client.crt",
            "front-proxy-client.key",
        ] {
            let meta = std::fs::metadata(dir.join("pki").join(f)).unwrap();
            let mode = meta.permissions().mode() & 0o777;
            let want = if f.ends_with(".key") { 0o600 } else { 0o644 };
            assert_eq!(mode, want, "{f}");
        }
        let ca = std::fs::read_to_string(dir.join("pki/ca.crt")).unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        // a second call keeps the set
        ensure(&dir, &mut log).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("pki/ca.crt")).unwrap(), ca);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

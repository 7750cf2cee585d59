//! The route table: our paths, their options, and the virt-api path and body each one calls.
//!
//! Pure functions over a path and a query string.

use serde_json::{Value, json};

use crate::error::{Error, Result};

/// The API group served here.
pub const GROUP: &str = "subresources.virtualization.deckhouse.io";
/// The version served here.
pub const VERSION: &str = "v1alpha2";
/// virt-api's group and version prefix.
pub const VIRT_API_PREFIX: &str = "/apis/subresources.kubevirt.io/v1/namespaces";

/// What a request path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiPath<'a> {
    /// `/apis`
    Apis,
    /// `/apis/<group>`
    Group,
    /// `/apis/<group>/<version>`
    Version,
    /// `.../namespaces/{ns}/virtualmachines` (a list: not served)
    VmList {
        /// Namespace.
        namespace: &'a str,
    },
    /// `.../namespaces/{ns}/virtualmachines/{name}`
    Vm {
        /// Namespace.
        namespace: &'a str,
        /// VM name.
        name: &'a str,
    },
    /// `.../namespaces/{ns}/virtualmachines/{name}/{sub}` (`sub` not yet checked)
    Subresource {
        /// Namespace.
        namespace: &'a str,
        /// VM name.
        name: &'a str,
        /// The subresource segment as given.
        sub: &'a str,
    },
    /// `.../namespaces/{ns}/virtualmachines[/{name}[/{sub}]]` whose namespace or VM name
    /// cannot be an object's name (`Vm_Bad`, 300 characters, `..`, `a%2Fb`): a 400 naming it,
    /// for every subresource, whatever the method.
    InvalidName {
        /// Why, naming the value.
        message: String,
    },
    /// Anything else (health, version, OpenAPI and unknown paths).
    Other,
}

/// Parses a request path (without query).
pub fn parse_path(path: &str) -> ApiPath<'_> {
    let path = path.strip_suffix('/').unwrap_or(path);
    if path == "/apis" {
        return ApiPath::Apis;
    }
    let Some(rest) = path.strip_prefix("/apis/").and_then(|r| r.strip_prefix(GROUP)) else {
        return ApiPath::Other;
    };
    if rest.is_empty() {
        return ApiPath::Group;
    }
    let Some(rest) = rest.strip_prefix('/').and_then(|r| r.strip_prefix(VERSION)) else {
        return ApiPath::Other;
    };
    if rest.is_empty() {
        return ApiPath::Version;
    }
    let segs: Vec<&str> = match rest.strip_prefix('/') {
        Some(r) => r.split('/').collect(),
        None => return ApiPath::Other,
    };
    if let ["namespaces", ns, "virtualmachines", rest @ ..] = segs.as_slice()
        && rest.len() <= 2
    {
        if let Err(why) = dns_label(ns) {
            return ApiPath::InvalidName {
                message: format!("invalid namespace {ns:?}: {why}"),
            };
        }
        if let Some(name) = rest.first()
            && let Err(why) = dns_subdomain(name)
        {
            return ApiPath::InvalidName {
                message: format!("invalid VirtualMachine name {name:?}: {why}"),
            };
        }
    }
    if segs.iter().any(|s| !is_name(s)) {
        return ApiPath::Other;
    }
    match segs[..] {
        ["namespaces", ns, "virtualmachines"] => ApiPath::VmList { namespace: ns },
        ["namespaces", ns, "virtualmachines", name] => ApiPath::Vm { namespace: ns, name },
        ["namespaces", ns, "virtualmachines", name, sub] => ApiPath::Subresource {
            namespace: ns,
            name,
            sub,
        },
        _ => ApiPath::Other,
    }
}

/// Kubernetes' check of a namespace name (an RFC 1123 label), with its message.
fn dns_label(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    rfc1123(s, false)
}

/// Kubernetes' check of an object name (a lowercase RFC 1123 subdomain), with its message.
fn dns_subdomain(s: &str) -> Result<(), String> {
    if s.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    rfc1123(s, true)
}

fn rfc1123(s: &str, dots: bool) -> Result<(), String> {
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || (dots && *b == b'.');
    let ok = edge(s.as_bytes().first())
        && edge(s.as_bytes().last())
        && s.as_bytes().iter().all(inner)
        && (!dots
            || s.split('.')
                .all(|l| edge(l.as_bytes().first()) && edge(l.as_bytes().last())));
    if ok {
        Ok(())
    } else if dots {
        Err("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into())
    } else {
        Err("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character".into())
    }
}

/// A path segment that can be a Kubernetes name (no encoded or dot segments).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

/// The subresources served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    /// Serial console (stream).
    Console,
    /// VNC (stream).
    Vnc,
    /// Port forward (stream).
    PortForward,
    /// Hot-plug a volume.
    AddVolume,
    /// Unplug a volume.
    RemoveVolume,
    /// Freeze the guest's filesystems.
    Freeze,
    /// Thaw them.
    Unfreeze,
    /// Hot-plug a resource claim.
    AddResourceClaim,
    /// Unplug a resource claim.
    RemoveResourceClaim,
}

impl Sub {
    /// Every subresource, in discovery order.
    pub const ALL: [Sub; 9] = [
        Sub::Console,
        Sub::Vnc,
        Sub::PortForward,
        Sub::AddVolume,
        Sub::RemoveVolume,
        Sub::Freeze,
        Sub::Unfreeze,
        Sub::AddResourceClaim,
        Sub::RemoveResourceClaim,
    ];

    /// The path segment.
    pub fn name(self) -> &'static str {
        match self {
            Sub::Console => "console",
            Sub::Vnc => "vnc",
            Sub::PortForward => "portforward",
            Sub::AddVolume => "addvolume",
            Sub::RemoveVolume => "removevolume",
            Sub::Freeze => "freeze",
            Sub::Unfreeze => "unfreeze",
            Sub::AddResourceClaim => "addresourceclaim",
            Sub::RemoveResourceClaim => "removeresourceclaim",
        }
    }

    /// The options kind.
    pub fn kind(self) -> &'static str {
        match self {
            Sub::Console => "VirtualMachineConsole",
            Sub::Vnc => "VirtualMachineVNC",
            Sub::PortForward => "VirtualMachinePortForward",
            Sub::AddVolume => "VirtualMachineAddVolume",
            Sub::RemoveVolume => "VirtualMachineRemoveVolume",
            Sub::Freeze => "VirtualMachineFreeze",
            Sub::Unfreeze => "VirtualMachineUnfreeze",
            Sub::AddResourceClaim => "VirtualMachineAddResourceClaim",
            Sub::RemoveResourceClaim => "VirtualMachineRemoveResourceClaim",
        }
    }

    /// Parses a path segment.
    pub fn parse(s: &str) -> Option<Sub> {
        Sub::ALL.into_iter().find(|x| x.name() == s)
    }

    /// A stream (upgrade required).
    pub fn is_stream(self) -> bool {
        matches!(self, Sub::Console | Sub::Vnc | Sub::PortForward)
    }

    /// Whether `method` is served (streams: GET, POST; the others: PUT).
    pub fn allows(self, method: &http::Method) -> bool {
        if self.is_stream() {
            method == http::Method::GET || method == http::Method::POST
        } else {
            method == http::Method::PUT
        }
    }

    /// The phases the VM must be in, and the message when it is not.
    pub fn required_phases(self) -> Option<(&'static [&'static str], &'static str)> {
        match self {
            Sub::Console | Sub::Vnc | Sub::PortForward => Some((
                &["Running", "Migrating"],
                "VirtualMachine is not Running or Migrating",
            )),
            Sub::Freeze | Sub::Unfreeze => Some((&["Running"], "VirtualMachine is not Running")),
            _ => None,
        }
    }
}

/// What is sent to virt-api.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The path on virt-api (no query).
    pub path: String,
    /// A replacement body, or `None` to pass the client's body through.
    pub body: Option<Vec<u8>>,
}

/// The query parameters, last value wins; repeated ones (`dryRun`) collected.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: &str) -> Query {
        Query(form_urlencoded::parse(q.as_bytes()).into_owned().collect())
    }
    fn get(&self, k: &str) -> &str {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| n == k)
            .map_or("", |(_, v)| v.as_str())
    }
    fn all(&self, k: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .collect()
    }
    fn has(&self, k: &str) -> bool {
        self.0.iter().any(|(n, _)| n == k)
    }
    fn bool(&self, k: &str) -> Result<bool> {
        match self.get(k) {
            "" | "false" | "False" | "0" => Ok(false),
            "true" | "True" | "1" => Ok(true),
            v => Err(Error::BadRequest(format!("invalid {k} {v:?}: not a boolean"))),
        }
    }
}

/// The virt-api path and body for subresource `sub` of VM `ns/name` with `query`.
pub fn target(sub: Sub, ns: &str, name: &str, query: &str) -> Result<Target> {
    let q = Query::parse(query);
    let vmi = |s: &str| format!("{VIRT_API_PREFIX}/{ns}/virtualmachineinstances/{name}/{s}");
    let vm = |s: &str| format!("{VIRT_API_PREFIX}/{ns}/virtualmachines/{name}/{s}");
    let pass = |path: String| Target { path, body: None };
    let with = |path: String, body: Value| Target {
        path,
        body: Some(body.to_string().into_bytes()),
    };
    Ok(match sub {
        Sub::Console | Sub::Vnc => pass(vmi(sub.name())),
        Sub::PortForward => {
            let port = q.get("port");
            let p = match port.parse::<u16>() {
                Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
                _ if port.is_empty() => {
                    return Err(Error::BadRequest("port is required".into()));
                }
                _ => {
                    return Err(Error::BadRequest(format!(
                        "invalid port {port:?}: must be 1-65535"
                    )));
                }
            };
            match q.get("protocol") {
                "" => pass(vmi(&format!("portforward/{p}"))),
                proto @ ("tcp" | "udp") => pass(vmi(&format!("portforward/{p}/{proto}"))),
                proto => {
                    return Err(Error::BadRequest(format!(
                        "invalid protocol {proto:?}: must be tcp or udp"
                    )));
                }
            }
        }
        Sub::Freeze => {
            if q.has("unfreezeTimeout") {
                let t = q.get("unfreezeTimeout");
                if !is_go_duration(t) {
                    return Err(Error::BadRequest(format!(
                        "invalid unfreezeTimeout {t:?}: not a duration such as 5m or 30s"
                    )));
                }
                with(vmi("freeze"), json!({ "unfreezeTimeout": t }))
            } else {
                pass(vmi("freeze"))
            }
        }
        Sub::Unfreeze => pass(vmi("unfreeze")),
        Sub::AddVolume => add_volume(&q, vmi, vm)?,
        Sub::RemoveVolume => match q.get("name") {
            "" => pass(vmi("removevolume")),
            n => with(vm("removevolume"), json!({ "name": n })),
        },
        Sub::AddResourceClaim => {
            let (n, tmpl, req) = (
                q.get("name"),
                q.get("resourceClaimTemplateName"),
                q.get("requestName"),
            );
            if n.is_empty() && tmpl.is_empty() && req.is_empty() {
                pass(vmi("addresourceclaim"))
            } else {
                if n.is_empty() {
                    return Err(Error::BadRequest("name is required".into()));
                }
                with(
                    vm("addresourceclaim"),
                    json!({
                        "name": n,
                        "hostDevice": {"name": n, "claimRequest": {"claimName": n, "requestName": req}},
                        "resourceClaim": {"name": n, "resourceClaimTemplateName": tmpl, "hotpluggable": true},
                        "dryRun": q.all("dryRun"),
                    }),
                )
            }
        }
        Sub::RemoveResourceClaim => match q.get("name") {
            "" => pass(vmi("removeresourceclaim")),
            n => with(
                vm("removeresourceclaim"),
                json!({ "name": n, "dryRun": q.all("dryRun") }),
            ),
        },
    })
}

fn add_volume(q: &Query, vmi: impl Fn(&str) -> String, vm: impl Fn(&str) -> String) -> Result<Target> {
    let (kind, pvc, image) = (q.get("volumeKind"), q.get("pvcName"), q.get("image"));
    if kind.is_empty() && pvc.is_empty() && image.is_empty() {
        // A request from KubeVirt itself: its body goes to the VMI unchanged.
        return Ok(Target {
            path: vmi("addvolume"),
            body: None,
        });
    }
    let name = q.get("name");
    if name.is_empty() {
        return Err(Error::BadRequest("name is required".into()));
    }
    let cdrom = q.bool("isCdrom")?;
    let source = match kind {
        "VirtualDisk" if !pvc.is_empty() => {
            json!({"persistentVolumeClaim": {"claimName": pvc, "hotpluggable": true}})
        }
        "VirtualDisk" => {
            return Err(Error::BadRequest("pvcName is required for a VirtualDisk".into()));
        }
        "VirtualImage" => match (pvc.is_empty(), image.is_empty()) {
            (false, true) => {
                json!({"persistentVolumeClaim": {"claimName": pvc, "readOnly": true, "hotpluggable": true}})
            }
            (true, false) => json!({"containerDisk": {"image": image, "hotpluggable": true}}),
            _ => {
                return Err(Error::BadRequest(
                    "exactly one of pvcName and image is required for a VirtualImage".into(),
                ));
            }
        },
        "ClusterVirtualImage" if !image.is_empty() => json!({"containerDisk": {"image": image}}),
        "ClusterVirtualImage" => {
            return Err(Error::BadRequest(
                "image is required for a ClusterVirtualImage".into(),
            ));
        }
        other => {
            return Err(Error::BadRequest(format!("invalid volume kind {other:?}")));
        }
    };
    let mut disk = json!({"name": name, "errorPolicy": "report"});
    if cdrom {
        disk["cdrom"] = json!({"bus": "scsi", "readonly": true});
    } else {
        disk["disk"] = json!({"bus": "scsi"});
        let serial = q.get("serial");
        if !serial.is_empty() {
            disk["serial"] = json!(serial);
        }
    }
    let body = json!({"name": name, "disk": disk, "volumeSource": source});
    Ok(Target {
        path: vm("addvolume"),
        body: Some(body.to_string().into_bytes()),
    })
}

/// A Go `time.Duration` string: `0`, or signed decimal numbers with units (`1h30m`, `1.5s`).
pub fn is_go_duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let num = &rest[..num_end];
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return false;
        }
        rest = &rest[num_end..];
        let unit = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"]
            .into_iter()
            .filter(|u| rest.starts_with(u))
            .max_by_key(|u| u.len());
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/apis/subresources.virtualization.deckhouse.io/v1alpha2";

    #[test]
    fn paths() {
        assert_eq!(parse_path("/apis"), ApiPath::Apis);
        assert_eq!(parse_path("/apis/"), ApiPath::Apis);
        assert_eq!(
            parse_path("/apis/subresources.virtualization.deckhouse.io"),
            ApiPath::Group
        );
        assert_eq!(parse_path(P), ApiPath::Version);
        assert_eq!(
            parse_path(&format!("{P}/namespaces/ns/virtualmachines")),
            ApiPath::VmList { namespace: "ns" }
        );
        assert_eq!(
            parse_path(&format!("{P}/namespaces/ns/virtualmachines/vm-1")),
            ApiPath::Vm {
                namespace: "ns",
                name: "vm-1"
            }
        );
        assert_eq!(
            parse_path(&format!("{P}/namespaces/ns/virtualmachines/vm-1/console")),
            ApiPath::Subresource {
                namespace: "ns",
                name: "vm-1",
                sub: "console"
            }
        );
        for other in [
            "/healthz",
            "/apis/subresources.virtualization.deckhouse.iox",
            "/apis/subresources.virtualization.deckhouse.io/v1",
            "/apis/subresources.virtualization.deckhouse.io/v1alpha2x",
            &format!("{P}/namespaces/ns/virtualmachines/vm/console/extra"),
            &format!("{P}/namespaces/ns/pods/vm/console"),
            &format!("{P}/namespaces/ns/virtualmachines/vm/con%2Fsole"),
        ] {
            assert_eq!(parse_path(other), ApiPath::Other, "{other}");
        }
    }

    #[test]
    fn names_that_cannot_be_objects_are_named_in_the_answer() {
        let long = "v".repeat(300);
        for (path, says) in [
            (
                format!("{P}/namespaces/ns/virtualmachines/Vm_Bad/unfreeze"),
                "invalid VirtualMachine name \"Vm_Bad\": a lowercase RFC 1123 subdomain",
            ),
            (
                format!("{P}/namespaces/ns/virtualmachines/{long}/freeze"),
                "must be no more than 253 characters",
            ),
            (
                format!("{P}/namespaces/ns/virtualmachines/../console"),
                "invalid VirtualMachine name \"..\"",
            ),
            (
                format!("{P}/namespaces/ns/virtualmachines/%2e%2e/console"),
                "invalid VirtualMachine name \"%2e%2e\"",
            ),
            (
                format!("{P}/namespaces/ns/virtualmachines/a%2Fb/unfreeze"),
                "invalid VirtualMachine name \"a%2Fb\"",
            ),
            (
                format!("{P}/namespaces/ns/virtualmachines/a..b"),
                "invalid VirtualMachine name \"a..b\"",
            ),
            (
                format!("{P}/namespaces//virtualmachines/vm/console"),
                "invalid namespace \"\"",
            ),
            (
                format!("{P}/namespaces/Ns/virtualmachines"),
                "invalid namespace \"Ns\": a lowercase RFC 1123 label",
            ),
        ] {
            match parse_path(&path) {
                ApiPath::InvalidName { message } => assert!(message.contains(says), "{path}: {message}"),
                other => panic!("{path}: {other:?}"),
            }
        }
        assert!(matches!(
            parse_path(&format!("{P}/namespaces/ns/virtualmachines/vm.a-1/unfreeze")),
            ApiPath::Subresource { name: "vm.a-1", .. }
        ));
    }

    #[test]
    fn subresource_table() {
        for s in Sub::ALL {
            assert_eq!(Sub::parse(s.name()), Some(s));
            assert!(s.kind().starts_with("VirtualMachine"));
        }
        assert_eq!(Sub::parse("migrate"), None);
        assert!(Sub::Console.allows(&http::Method::GET));
        assert!(Sub::Console.allows(&http::Method::POST));
        assert!(!Sub::Console.allows(&http::Method::PUT));
        assert!(Sub::Freeze.allows(&http::Method::PUT));
        assert!(!Sub::Freeze.allows(&http::Method::GET));
        assert_eq!(
            Sub::Vnc.required_phases().unwrap().1,
            "VirtualMachine is not Running or Migrating"
        );
        assert_eq!(Sub::Unfreeze.required_phases().unwrap().0, ["Running"]);
        assert_eq!(Sub::AddVolume.required_phases(), None);
    }

    fn t(sub: Sub, q: &str) -> Result<Target> {
        target(sub, "ns", "vm", q)
    }

    fn body(t: &Target) -> Value {
        serde_json::from_slice(t.body.as_ref().expect("a body")).unwrap()
    }

    const VMI: &str = "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/vm";
    const VM: &str = "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm";

    #[test]
    fn streams() {
        assert_eq!(t(Sub::Console, "").unwrap().path, format!("{VMI}/console"));
        assert_eq!(t(Sub::Vnc, "").unwrap().path, format!("{VMI}/vnc"));
        assert_eq!(
            t(Sub::PortForward, "port=22&protocol=tcp").unwrap().path,
            format!("{VMI}/portforward/22/tcp")
        );
        assert_eq!(
            t(Sub::PortForward, "port=8080").unwrap().path,
            format!("{VMI}/portforward/8080")
        );
        for bad in [
            "",
            "port=",
            "port=abc",
            "port=0",
            "port=65536",
            "port=-1",
            "port=+22",
            "port=22&protocol=sctp",
        ] {
            let e = t(Sub::PortForward, bad).unwrap_err();
            assert!(matches!(e, Error::BadRequest(_)), "{bad}: {e}");
        }
    }

    #[test]
    fn freeze_and_unfreeze() {
        let f = t(Sub::Freeze, "unfreezeTimeout=5m").unwrap();
        assert_eq!(f.path, format!("{VMI}/freeze"));
        assert_eq!(body(&f), json!({"unfreezeTimeout": "5m"}));
        assert_eq!(t(Sub::Freeze, "").unwrap().body, None);
        assert!(t(Sub::Freeze, "unfreezeTimeout=soon").is_err());
        let u = t(Sub::Unfreeze, "").unwrap();
        assert_eq!(
            (u.path.as_str(), u.body),
            (format!("{VMI}/unfreeze").as_str(), None)
        );
    }

    #[test]
    fn volumes() {
        let a = t(
            Sub::AddVolume,
            "name=d1&volumeKind=VirtualDisk&pvcName=pvc-1&serial=s1",
        )
        .unwrap();
        assert_eq!(a.path, format!("{VM}/addvolume"));
        assert_eq!(
            body(&a),
            json!({"name": "d1",
                "disk": {"name": "d1", "errorPolicy": "report", "disk": {"bus": "scsi"}, "serial": "s1"},
                "volumeSource": {"persistentVolumeClaim": {"claimName": "pvc-1", "hotpluggable": true}}})
        );
        let c = t(
            Sub::AddVolume,
            "name=iso&volumeKind=ClusterVirtualImage&image=reg/i:1&isCdrom=true",
        )
        .unwrap();
        assert_eq!(
            body(&c),
            json!({"name": "iso",
                "disk": {"name": "iso", "errorPolicy": "report", "cdrom": {"bus": "scsi", "readonly": true}},
                "volumeSource": {"containerDisk": {"image": "reg/i:1"}}})
        );
        let vi = t(Sub::AddVolume, "name=v&volumeKind=VirtualImage&pvcName=p").unwrap();
        assert_eq!(
            body(&vi)["volumeSource"]["persistentVolumeClaim"]["readOnly"],
            true
        );
        // From KubeVirt: to the VMI, body unchanged.
        let k = t(Sub::AddVolume, "").unwrap();
        assert_eq!((k.path, k.body), (format!("{VMI}/addvolume"), None));
        for bad in [
            "volumeKind=VirtualDisk&pvcName=p",
            "name=d&volumeKind=VirtualDisk",
            "name=d&volumeKind=VirtualImage&pvcName=p&image=i",
            "name=d&volumeKind=ClusterVirtualImage",
            "name=d&volumeKind=Blob&image=i",
            "name=d&volumeKind=VirtualDisk&pvcName=p&isCdrom=maybe",
        ] {
            assert!(
                matches!(t(Sub::AddVolume, bad), Err(Error::BadRequest(_))),
                "{bad}"
            );
        }
        let r = t(Sub::RemoveVolume, "name=d1").unwrap();
        assert_eq!(r.path, format!("{VM}/removevolume"));
        assert_eq!(body(&r), json!({"name": "d1"}));
        assert_eq!(
            t(Sub::RemoveVolume, "").unwrap().path,
            format!("{VMI}/removevolume")
        );
    }

    #[test]
    fn resource_claims() {
        let a = t(
            Sub::AddResourceClaim,
            "name=usb&resourceClaimTemplateName=tpl&requestName=r&dryRun=All",
        )
        .unwrap();
        assert_eq!(a.path, format!("{VM}/addresourceclaim"));
        assert_eq!(
            body(&a),
            json!({"name": "usb",
                "hostDevice": {"name": "usb", "claimRequest": {"claimName": "usb", "requestName": "r"}},
                "resourceClaim": {"name": "usb", "resourceClaimTemplateName": "tpl", "hotpluggable": true},
                "dryRun": ["All"]})
        );
        assert!(t(Sub::AddResourceClaim, "requestName=r").is_err());
        assert_eq!(t(Sub::AddResourceClaim, "").unwrap().body, None);
        let r = t(Sub::RemoveResourceClaim, "name=usb").unwrap();
        assert_eq!(body(&r), json!({"name": "usb", "dryRun": []}));
    }

    #[test]
    fn durations() {
        for ok in ["0", "5m", "30s", "1h30m", "1.5s", "100ms", "-1s", "2µs"] {
            assert!(is_go_duration(ok), "{ok}");
        }
        for bad in ["", "5", "m", "1x", "1..2s", "s5", "1h 2m", ".s"] {
            assert!(!is_go_duration(bad), "{bad}");
        }
    }
}

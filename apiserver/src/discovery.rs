//! Discovery documents (`/apis`, the APIGroup, the APIResourceList) and `/version`.

use serde_json::{Value, json};

use crate::subresources::{GROUP, Sub, VERSION};

fn group_version() -> String {
    format!("{GROUP}/{VERSION}")
}

fn group() -> Value {
    json!({
        "name": GROUP,
        "versions": [{"groupVersion": group_version(), "version": VERSION}],
        "preferredVersion": {"groupVersion": group_version(), "version": VERSION},
    })
}

/// `/apis`: the APIGroupList with our one group.
pub fn api_group_list() -> Value {
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group()]})
}

/// `/apis/<group>`: the APIGroup.
pub fn api_group() -> Value {
    let mut g = group();
    let obj = g.as_object_mut().expect("object");
    obj.insert("kind".into(), json!("APIGroup"));
    obj.insert("apiVersion".into(), json!("v1"));
    g
}

/// `/apis/<group>/<version>`: `virtualmachines` with `get`, each subresource with its kind
/// and no verbs (connect-only subresources are not listed with verbs, as in k8s.io/apiserver).
pub fn api_resource_list() -> Value {
    let mut resources = vec![json!({
        "name": "virtualmachines",
        "singularName": "",
        "namespaced": true,
        "kind": "VirtualMachine",
        "verbs": ["get"],
    })];
    for s in Sub::ALL {
        resources.push(json!({
            "name": format!("virtualmachines/{}", s.name()),
            "singularName": "",
            "namespaced": true,
            "kind": s.kind(),
            "verbs": [],
        }));
    }
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(),
        "resources": resources,
    })
}

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "0",
        "minor": "1",
        "gitVersion": concat!("v", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_list_has_the_vm_and_every_subresource() {
        let l = api_resource_list();
        assert_eq!(
            l["groupVersion"],
            "subresources.virtualization.deckhouse.io/v1alpha2"
        );
        let r = l["resources"].as_array().unwrap();
        assert_eq!(r.len(), 10);
        assert_eq!(r[0]["name"], "virtualmachines");
        assert_eq!(r[0]["verbs"], json!(["get"]));
        let console = r.iter().find(|x| x["name"] == "virtualmachines/console").unwrap();
        assert_eq!(console["kind"], "VirtualMachineConsole");
        assert_eq!(console["verbs"], json!([]));
        assert!(r.iter().all(|x| x["namespaced"] == true));
    }

    #[test]
    fn group_documents() {
        let l = api_group_list();
        assert_eq!(l["kind"], "APIGroupList");
        assert_eq!(l["groups"][0]["name"], GROUP);
        assert_eq!(l["groups"][0]["preferredVersion"]["version"], "v1alpha2");
        let g = api_group();
        assert_eq!(g["kind"], "APIGroup");
        assert_eq!(
            g["versions"][0]["groupVersion"],
            "subresources.virtualization.deckhouse.io/v1alpha2"
        );
        assert_eq!(version()["gitVersion"], "v0.1.0");
    }
}

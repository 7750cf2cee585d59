//! OpenAPI documents describing the kinds: `/openapi/v2` (fetched and merged by the
//! aggregator) and `/openapi/v3` (discovery document and the group-version document).

use serde_json::{Map, Value, json};

use crate::subresources::{GROUP, Sub, VERSION};

/// The definition name prefix, in the Kubernetes style (reversed group).
const PREFIX: &str = "io.deckhouse.virtualization.subresources.v1alpha2";

/// The query options of each kind: (name, type, description).
fn fields(kind: &str) -> &'static [(&'static str, &'static str, &'static str)] {
    match kind {
        "VirtualMachineConsole" | "VirtualMachineVNC" => &[(
            "probe",
            "boolean",
            "Answer whether a session exists instead of connecting.",
        )],
        "VirtualMachinePortForward" => &[
            ("port", "integer", "The VM's port."),
            ("protocol", "string", "tcp or udp."),
        ],
        "VirtualMachineAddVolume" => &[
            ("name", "string", "The disk's name in the VM."),
            (
                "volumeKind",
                "string",
                "VirtualDisk, VirtualImage or ClusterVirtualImage.",
            ),
            (
                "pvcName",
                "string",
                "The PersistentVolumeClaim of the disk or image.",
            ),
            ("image", "string", "The container image of the image."),
            ("serial", "string", "The disk's serial number."),
            ("isCdrom", "boolean", "Attach as a CD-ROM."),
        ],
        "VirtualMachineRemoveVolume" => &[("name", "string", "The disk's name in the VM.")],
        "VirtualMachineFreeze" => &[(
            "unfreezeTimeout",
            "string",
            "Thaw automatically after this duration.",
        )],
        "VirtualMachineAddResourceClaim" => &[
            ("name", "string", "The claim's name in the VM."),
            (
                "resourceClaimTemplateName",
                "string",
                "The ResourceClaimTemplate.",
            ),
            ("requestName", "string", "The request of the claim."),
            ("dryRun", "array", "All: do not persist."),
        ],
        "VirtualMachineRemoveResourceClaim" => &[
            ("name", "string", "The claim's name in the VM."),
            ("dryRun", "array", "All: do not persist."),
        ],
        _ => &[],
    }
}

fn schema(kind: &str, v3: bool) -> Value {
    let mut props = Map::new();
    props.insert(
        "apiVersion".into(),
        json!({"type": "string", "description": "The versioned schema of this object."}),
    );
    props.insert(
        "kind".into(),
        json!({"type": "string", "description": "The kind of this object."}),
    );
    if kind == "VirtualMachine" {
        let meta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
        let r = if v3 {
            format!("#/components/schemas/{meta}")
        } else {
            format!("#/definitions/{meta}")
        };
        props.insert("metadata".into(), json!({"$ref": r}));
    }
    for (name, ty, desc) in fields(kind) {
        let mut p = json!({"type": ty, "description": desc});
        if *ty == "array" {
            p["items"] = json!({"type": "string"});
        }
        props.insert((*name).into(), p);
    }
    json!({
        "type": "object",
        "description": format!("{kind} of {GROUP}/{VERSION}."),
        "properties": props,
        "x-kubernetes-group-version-kind": [{"group": GROUP, "version": VERSION, "kind": kind}],
    })
}

fn kinds() -> impl Iterator<Item = &'static str> {
    std::iter::once("VirtualMachine").chain(Sub::ALL.into_iter().map(Sub::kind))
}

fn paths(v3: bool) -> Value {
    let base = format!("/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/virtualmachines/{{name}}");
    let params = json!([
        {"name": "namespace", "in": "path", "required": true, "type": "string", "description": "object name and auth scope"},
        {"name": "name", "in": "path", "required": true, "type": "string", "description": "name of the VirtualMachine"},
    ]);
    let ok = |kind: &str| {
        let r = if v3 {
            json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{PREFIX}.{kind}")}}}})
        } else {
            json!({"description": "OK", "schema": {"$ref": format!("#/definitions/{PREFIX}.{kind}")}})
        };
        json!({"200": r})
    };
    let mut paths = Map::new();
    paths.insert(
        base.clone(),
        json!({"parameters": params, "get": {"operationId": "readVirtualMachine", "responses": ok("VirtualMachine")}}),
    );
    for s in Sub::ALL {
        let op = json!({
            "operationId": format!("connectVirtualMachine{}", s.kind().trim_start_matches("VirtualMachine")),
            "description": format!("connect to the {} of a VirtualMachine", s.name()),
            "responses": {"200": {"description": "OK"}},
        });
        let mut item = json!({"parameters": params});
        if s.is_stream() {
            item["get"] = op.clone();
            item["post"] = op;
        } else {
            item["put"] = op;
        }
        paths.insert(format!("{base}/{}", s.name()), item);
    }
    Value::Object(paths)
}

fn object_meta() -> Value {
    json!({"type": "object", "description": "Standard object metadata.",
        "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "uid": {"type": "string"},
            "resourceVersion": {"type": "string"}, "labels": {"type": "object", "additionalProperties": {"type": "string"}}}})
}

/// `/openapi/v2`.
pub fn v2() -> Value {
    let mut defs = Map::new();
    for k in kinds() {
        defs.insert(format!("{PREFIX}.{k}"), schema(k, false));
    }
    defs.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".into(),
        object_meta(),
    );
    json!({
        "swagger": "2.0",
        "info": {"title": "VirtualizationAPI", "version": VERSION},
        "paths": paths(false),
        "definitions": defs,
    })
}

/// The path of our group-version's OpenAPI v3 document.
pub fn v3_group_path() -> String {
    format!("/openapi/v3/apis/{GROUP}/{VERSION}")
}

/// `/openapi/v3`: the discovery of v3 documents.
pub fn v3_index() -> Value {
    json!({"paths": {format!("apis/{GROUP}/{VERSION}"): {"serverRelativeURL": v3_group_path()}}})
}

/// `/openapi/v3/apis/<group>/<version>`.
pub fn v3_group() -> Value {
    let mut schemas = Map::new();
    for k in kinds() {
        schemas.insert(format!("{PREFIX}.{k}"), schema(k, true));
    }
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".into(),
        object_meta(),
    );
    let mut paths = paths(true);
    // OpenAPI 3 parameters carry a schema instead of a type.
    for item in paths.as_object_mut().expect("object").values_mut() {
        for p in item["parameters"].as_array_mut().expect("array") {
            let obj = p.as_object_mut().expect("object");
            obj.remove("type");
            obj.insert("schema".into(), json!({"type": "string"}));
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "VirtualizationAPI", "version": VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_describes_every_kind_and_path() {
        let d = v2();
        assert_eq!(d["swagger"], "2.0");
        let defs = d["definitions"].as_object().unwrap();
        for k in kinds() {
            let def = &defs[&format!("{PREFIX}.{k}")];
            assert_eq!(def["x-kubernetes-group-version-kind"][0]["kind"], k);
        }
        assert_eq!(
            defs[&format!("{PREFIX}.VirtualMachinePortForward")]["properties"]["port"]["type"],
            "integer"
        );
        let paths = d["paths"].as_object().unwrap();
        assert_eq!(paths.len(), 10);
        let console = &paths["/apis/subresources.virtualization.deckhouse.io/v1alpha2/namespaces/{namespace}/virtualmachines/{name}/console"];
        assert!(console.get("get").is_some() && console.get("put").is_none());
        // Every $ref resolves.
        let text = d.to_string();
        for r in text.split("\"$ref\":\"#/definitions/").skip(1) {
            let name = &r[..r.find('"').unwrap()];
            assert!(defs.contains_key(name), "{name}");
        }
    }

    #[test]
    fn v3_documents() {
        assert_eq!(
            v3_index()["paths"]["apis/subresources.virtualization.deckhouse.io/v1alpha2"]["serverRelativeURL"],
            "/openapi/v3/apis/subresources.virtualization.deckhouse.io/v1alpha2"
        );
        let d = v3_group();
        assert_eq!(d["openapi"], "3.0.0");
        let schemas = d["components"]["schemas"].as_object().unwrap();
        let text = d.to_string();
        for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = &r[..r.find('"').unwrap()];
            assert!(schemas.contains_key(name), "{name}");
        }
        assert!(!text.contains("#/definitions/"));
    }
}

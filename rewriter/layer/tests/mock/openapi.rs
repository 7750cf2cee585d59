//! OpenAPI v3 documents through the layer.

use super::*;

/// `/openapi/v3` on documents built for the test (the captured ones: the core's `tests/openapi.rs`):
/// the group document is asked for under the renamed group with the client's query, both documents
/// come back restored with the rules version in their ETag, a 304 keeps it, and a 404 passes as is.
#[tokio::test]
async fn openapi_v3_index_and_group_documents() {
    let rules = Rules::builtin_kubevirt();
    let version = format!("{:016x}", rules.version());
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let doc_response = |status: u16, etag: &str, body: Value| {
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ETAG, etag)
            .body(body::full(body.to_string()))
            .expect("response")
    };

    // The index.
    let pending = call(&mut svc, get("/openapi/v3"));
    let (req, send) = handle.next_request().await.expect("request");
    assert_eq!(req.uri().path(), "/openapi/v3");
    let up_url = format!("/openapi/v3/apis/{INTERNAL}/v1?hash=ABC");
    send.send_response(doc_response(
        200,
        "\"I1\"",
        json!({"paths": {
            "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=P"},
            format!("apis/{INTERNAL}/v1"): {"serverRelativeURL": up_url},
        }}),
    ));
    let resp = pending.await.expect("task").expect("response");
    assert_eq!(
        resp.headers()[header::ETAG],
        format!("\"I1-r{version}\"").as_str()
    );
    let (status, index) = read_all(resp).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        index,
        json!({"paths": {
            "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=P"},
            "apis/kubevirt.io/v1": {"serverRelativeURL": "/openapi/v3/apis/kubevirt.io/v1?hash=ABC"},
        }})
    );

    // The group document, by the URL the index gave.
    let kind = "InternalVirtualizationVirtualMachine";
    let schema = format!("io.deckhouse.virtualization.internal.v1.{kind}");
    let pending = call(&mut svc, get("/openapi/v3/apis/kubevirt.io/v1?hash=ABC"));
    let (req, send) = handle.next_request().await.expect("request");
    assert_eq!(req.uri().to_string(), up_url);
    send.send_response(doc_response(
        200,
        "\"G1\"",
        json!({
            "openapi": "3.0.0",
            "paths": {format!("/apis/{INTERNAL}/v1/namespaces/{{namespace}}/internalvirtualizationvirtualmachines/{{name}}"): {
                "get": {
                    "responses": {"200": {"content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}}},
                    "x-kubernetes-group-version-kind": {"group": INTERNAL, "version": "v1", "kind": kind},
                }
            }},
            "components": {"schemas": {
                schema.clone(): {
                    "type": "object",
                    "properties": {"metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]}},
                    "x-kubernetes-group-version-kind": [{"group": INTERNAL, "version": "v1", "kind": kind}],
                },
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object"},
            }},
        }),
    ));
    let (status, doc) = read_all(pending.await.expect("task").expect("response")).await;
    assert_eq!(status, StatusCode::OK);
    let path = &doc["paths"]["/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}"]["get"];
    assert_eq!(
        path["x-kubernetes-group-version-kind"],
        json!({"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"})
    );
    assert_eq!(
        path["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.kubevirt.v1.VirtualMachine"
    );
    let vm = &doc["components"]["schemas"]["io.kubevirt.v1.VirtualMachine"];
    assert_eq!(vm["x-kubernetes-group-version-kind"][0]["group"], "kubevirt.io");
    assert!(!doc.to_string().contains(INTERNAL) && !doc.to_string().contains("InternalVirtualization"));

    // The client's copy under these rules is still good: upstream is asked with its own ETag.
    let mut req = get("/openapi/v3/apis/kubevirt.io/v1?hash=ABC");
    req.headers_mut().insert(
        header::IF_NONE_MATCH,
        format!("\"G1-r{version}\"").parse().expect("header"),
    );
    let pending = call(&mut svc, req);
    let (req, send) = handle.next_request().await.expect("request");
    assert_eq!(req.headers()[header::IF_NONE_MATCH], "\"G1\"");
    send.send_response(doc_response(304, "\"G1\"", Value::Null));
    let resp = pending.await.expect("task").expect("response");
    assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(
        resp.headers()[header::ETAG],
        format!("\"G1-r{version}\"").as_str()
    );

    // A copy made under other rules is not offered upstream.
    let mut req = get("/openapi/v3/apis/kubevirt.io/v1?hash=ABC");
    req.headers_mut().insert(
        header::IF_NONE_MATCH,
        "\"G1-r0000000000000000\"".parse().expect("header"),
    );
    let pending = call(&mut svc, req);
    let (req, send) = handle.next_request().await.expect("request");
    assert!(req.headers().get(header::IF_NONE_MATCH).is_none());
    send.send_response(json_response(404, b"404 page not found".to_vec()));
    // An upstream 404 passes unchanged.
    let resp = pending.await.expect("task").expect("response");
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let b = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&b[..], b"404 page not found");
}

// Command kubevirt-webhooks prints virt-api's MutatingWebhookConfiguration and
// ValidatingWebhookConfiguration of this KubeVirt release as one multi-document YAML stream,
// built by KubeVirt's own code (the components.NewVirtAPI*WebhookConfiguration functions
// virt-operator installs them with), with the original kubevirt.io names. Outside a cluster
// there is no virt-api Service: each webhook's clientConfig becomes the URL given (its path
// kept) with the CA bundle given.
//
// Usage: kubevirt-webhooks -url https://127.0.0.1:PORT -ca-bundle CA.crt [-namespace kubevirt]
package main

import (
	"flag"
	"fmt"
	"os"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
)

func main() {
	url := flag.String("url", "", "base URL the webhooks are reached at (https://HOST:PORT)")
	caFile := flag.String("ca-bundle", "", "PEM file of the CA that signed the webhook server's certificate")
	namespace := flag.String("namespace", "kubevirt", "KubeVirt's namespace")
	flag.Parse()
	if *url == "" || *caFile == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	ca, err := os.ReadFile(*caFile)
	if err != nil {
		fail(err)
	}
	point := func(c *admissionregistrationv1.WebhookClientConfig) {
		path := ""
		if c.Service != nil && c.Service.Path != nil {
			path = *c.Service.Path
		}
		u := *url + path
		c.Service = nil
		c.URL = &u
		c.CABundle = ca
	}
	mutating := components.NewVirtAPIMutatingWebhookConfiguration(*namespace)
	for i := range mutating.Webhooks {
		point(&mutating.Webhooks[i].ClientConfig)
	}
	validating := components.NewVirtAPIValidatingWebhookConfiguration(*namespace)
	for i := range validating.Webhooks {
		point(&validating.Webhooks[i].ClientConfig)
	}
	for _, obj := range []any{mutating, validating} {
		out, err := yaml.Marshal(obj)
		if err != nil {
			fail(err)
		}
		fmt.Printf("---\n%s", out)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kubevirt-webhooks:", err)
	os.Exit(1)
}

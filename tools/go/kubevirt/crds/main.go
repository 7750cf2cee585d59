// Command kubevirt-crds prints the CustomResourceDefinitions of this KubeVirt release as one
// multi-document YAML stream, built by KubeVirt's own code (the components.New*Crd functions
// virt-operator installs them with), with the original kubevirt.io names.
package main

import (
	"fmt"
	"os"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
)

func main() {
	makers := []func() (*extv1.CustomResourceDefinition, error){
		components.NewVirtualMachineInstanceCrd,
		components.NewVirtualMachineCrd,
		components.NewPresetCrd,
		components.NewReplicaSetCrd,
		components.NewVirtualMachineInstanceMigrationCrd,
		components.NewKubeVirtCrd,
		components.NewVirtualMachinePoolCrd,
		components.NewVirtualMachineSnapshotCrd,
		components.NewVirtualMachineSnapshotContentCrd,
		components.NewVirtualMachineRestoreCrd,
		components.NewVirtualMachineExportCrd,
		components.NewVirtualMachineInstancetypeCrd,
		components.NewVirtualMachineClusterInstancetypeCrd,
		components.NewVirtualMachinePreferenceCrd,
		components.NewVirtualMachineClusterPreferenceCrd,
		components.NewMigrationPolicyCrd,
		components.NewVirtualMachineCloneCrd,
	}
	for _, make := range makers {
		crd, err := make()
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubevirt-crds:", err)
			os.Exit(1)
		}
		crd.TypeMeta.APIVersion = "apiextensions.k8s.io/v1"
		crd.TypeMeta.Kind = "CustomResourceDefinition"
		out, err := yaml.Marshal(crd)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubevirt-crds:", err)
			os.Exit(1)
		}
		fmt.Printf("---\n%s", out)
	}
}

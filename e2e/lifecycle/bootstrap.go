package lifecycle

import (
	"os"

	corev1 "k8s.io/api/core/v1"

	"github.com/caplb/caplb/e2e/lab"
)

// The lab boots its machines with the files of the shipped KubeadmControlPlane sample (see
// lab.SampleBootFiles); these keep the lifecycle lab's own spelling.
type bootFile = lab.BootFile

func sampleFiles(sample string) (string, []bootFile, error) { return lab.SampleBootFiles(sample) }

func writeBootFiles(root string, files []bootFile, secret *corev1.Secret) error {
	return lab.WriteBootFiles(root, files, secret)
}

func writeFile(path string, content []byte, mode os.FileMode) error {
	return lab.WriteMachineFile(path, content, mode)
}

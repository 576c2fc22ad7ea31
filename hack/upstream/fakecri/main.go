// Command fakecri serves the fake container runtime that Kubernetes' own kubelet tests use, on a
// unix socket, so a real kubelet can run pods here without starting any container.
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cri-client/pkg/fake"
)

func main() {
	endpoint := flag.String("listen", "", "unix socket endpoint, for example unix:///tmp/cri.sock")
	flag.Parse()
	if *endpoint == "" {
		log.Fatal("fakecri: --listen is required")
	}
	runtime := fake.NewFakeRemoteRuntime()
	if err := runtime.Start(*endpoint); err != nil {
		log.Fatalf("fakecri: %v", err)
	}
	log.Printf("fakecri: serving %s", *endpoint)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
	runtime.Stop()
}

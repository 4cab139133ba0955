// Command capa-peers runs the upstream Kubernetes components capa-py's tests use as peers, from one binary:
//
//	capa-peers etcd --data-dir DIR --listen-client-url URL --listen-peer-url URL
//	capa-peers etcd-compact --endpoint URL
//	capa-peers kube-apiserver [kube-apiserver flags]
//	capa-peers kube-controller-manager [kube-controller-manager flags]
//
// The Kubernetes commands are the upstream ones (k8s.io/kubernetes/cmd/...), with their own flags; etcd is
// go.etcd.io/etcd/server/v3/embed with the few settings a single loopback member needs.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: capa-peers etcd|etcd-compact|kube-apiserver|kube-controller-manager [flags]")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	command, args := os.Args[1], os.Args[2:]
	switch command {
	case "etcd":
		os.Exit(runEtcd(args))
	case "etcd-compact":
		os.Exit(compactEtcd(args))
	case "kube-apiserver":
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kube-controller-manager":
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	default:
		usage()
	}
}

func parseURL(flagName, value string) (url.URL, error) {
	parsed, err := url.Parse(value)
	if err != nil || parsed.Host == "" {
		return url.URL{}, fmt.Errorf("--%s: not a URL: %q", flagName, value)
	}
	return *parsed, nil
}

// runEtcd serves one etcd member until SIGINT or SIGTERM.
func runEtcd(args []string) int {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "the member's data directory")
	client := fs.String("listen-client-url", "http://127.0.0.1:2379", "where clients connect")
	peer := fs.String("listen-peer-url", "http://127.0.0.1:2380", "where peers connect (one member: nobody)")
	logLevel := fs.String("log-level", "warn", "etcd's log level")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		return 2
	}
	clientURL, err := parseURL("listen-client-url", *client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 2
	}
	peerURL, err := parseURL("listen-peer-url", *peer)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name = "peer"
	cfg.Dir = *dataDir
	cfg.LogLevel = *logLevel
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	server, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	defer server.Close()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-server.Server.ReadyNotify():
		fmt.Println("etcd ready on", clientURL.String())
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "etcd: not ready after 60 s")
		return 1
	case <-stop:
		return 0
	}
	select {
	case err := <-server.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	case <-stop:
		return 0
	}
}

// compactEtcd compacts the store at its current revision, so that older resourceVersions are gone.
func compactEtcd(args []string) int {
	fs := flag.NewFlagSet("etcd-compact", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "http://127.0.0.1:2379", "the etcd client URL")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-compact:", err)
		return 1
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	status, err := client.Status(ctx, *endpoint)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-compact:", err)
		return 1
	}
	revision := status.Header.Revision
	if _, err := client.Compact(ctx, revision, clientv3.WithCompactPhysical()); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-compact:", err)
		return 1
	}
	fmt.Println(revision)
	return 0
}

// cert-manager-local runs cert-manager's controllers for the SelfSigned and CA issuers and its CA
// injector in one process, out of cluster, against a kubeconfig. It is built from the
// github.com/cert-manager/cert-manager Go module (testbed/certmanager.py binary()) for the
// integration tests' webhook serving certificates; it is not cert-manager's own command.
//
// The cert-manager.io/v1 CRDs (testbed/certmanager.py crds) must be installed before it starts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	crapprover "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	"github.com/cert-manager/cert-manager/pkg/util"

	// The Issuer implementations the issuers/clusterissuers controllers set up (they register
	// themselves with pkg/issuer when imported).
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The controllers started, by their registered names (each package registers itself with
// controller.Register when imported): Issuers and ClusterIssuers, the Certificate lifecycle, the
// CertificateRequest approver and the SelfSigned and CA signers.
var controllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	trigger.ControllerName,
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
	crapprover.ControllerName,
	crselfsigned.CRControllerName,
	crca.CRControllerName,
}

const workers = 5 // per controller, cert-manager's default

func main() {
	// Our own flag set: controller-runtime registers its own --kubeconfig on flag.CommandLine.
	flags := flag.NewFlagSet("cert-manager-local", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "path to the kubeconfig of the cluster (required)")
	clusterResourceNamespace := flags.String("cluster-resource-namespace", "cert-manager",
		"namespace of the Secrets that ClusterIssuers refer to (a CA ClusterIssuer's key pair)")
	namespace := flags.String("namespace", "", "namespace to watch (default: all)")
	metricsAddress := flags.String("metrics-address", "0", "address of cert-manager's Prometheus metrics (/metrics); 0: off")
	healthAddress := flags.String("health-address", "0", "address of /healthz and /readyz; 0: off")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	flags.Var(klogFlags.Lookup("v").Value, "v", "log verbosity (klog; 2: info, 4: debug)")
	_ = flags.Parse(os.Args[1:]) // exits on an error
	ctrl.SetLogger(klog.NewKlogr())

	if err := run(*kubeconfig, *clusterResourceNamespace, *namespace, *metricsAddress, *healthAddress); err != nil {
		klog.Flush()
		fmt.Fprintf(os.Stderr, "cert-manager-local: %v\n", err)
		os.Exit(1)
	}
	klog.Flush()
}

func run(kubeconfig, clusterResourceNamespace, namespace, metricsAddress, healthAddress string) error {
	// Fail early and clearly on a missing or bad kubeconfig, or a cluster without the CRDs.
	if kubeconfig == "" {
		return errors.New("--kubeconfig is required")
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		return fmt.Errorf("cannot read the kubeconfig: %w", err)
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("bad kubeconfig %s: %w", kubeconfig, err)
	}

	// SIGTERM/SIGINT cancel signalled; everything stops with it. A second signal kills at once.
	signalled, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() { <-signalled.Done(); stop() }()
	if err := waitForCRDs(signalled, restConfig, 30*time.Second); err != nil || signalled.Err() != nil {
		return err
	}
	// The first component to fail stops the others (and the process, with its error).
	g, ctx := errgroup.WithContext(signalled)

	// The CA injector: controller-runtime reconcilers that copy the ca.crt of the Secret of the
	// Certificate named in cert-manager.io/inject-ca-from (or of a Secret, or the API server's
	// CA) into webhook configurations, APIServices and CRD conversion webhooks, all four as
	// cainjector does by default. It watches Secrets as metadata only, so its client reads them
	// from the API server rather than from a cache. Its manager also serves /healthz and /readyz.
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(apiregistrationv1.AddToScheme(scheme))
	utilruntime.Must(cmapi.AddToScheme(scheme))
	cacheOptions := cache.Options{}
	if namespace != "" {
		cacheOptions.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	mgr, err := ctrl.NewManager(util.RestConfigWithUserAgent(restConfig, "cainjector"), ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOptions,
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		LeaderElection:         false, // one process
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: healthAddress,
	})
	if err != nil {
		return fmt.Errorf("cainjector manager: %w", err)
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	})
	if err != nil {
		return fmt.Errorf("cainjector: %w", err)
	}

	// The controllers share one ContextFactory, which owns the shared informer factories; each
	// constructor registers the informers it needs, so the factories start after all are built.
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20, // cert-manager's defaults; unused when the API server has APF
		KubernetesAPIBurst: 50,
		Namespace:          namespace,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: clusterResourceNamespace},
		CertificateOptions: controller.CertificateOptions{
			// cert-manager's defaults: copy all annotations but kubectl's, flux's and argo's
			// to CertificateRequests; back off from failed requests from 1h up to 32h.
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return fmt.Errorf("controller context: %w", err)
	}
	var runners []controller.Interface
	for _, name := range controllers {
		constructor, ok := controller.Known()[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		c, err := constructor(factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		runners = append(runners, c)
	}
	shared, err := factory.Build("local") // a Context: the shared informer factories and metrics
	if err != nil {
		return err
	}
	var metricsListener net.Listener
	if metricsAddress != "0" {
		if metricsListener, err = net.Listen("tcp", metricsAddress); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}

	// /healthz answers while the process runs; /readyz once every informer has synced.
	var ready atomic.Bool
	if healthAddress != "0" {
		utilruntime.Must(mgr.AddHealthzCheck("ping", healthz.Ping))
		utilruntime.Must(mgr.AddReadyzCheck("informers", func(*http.Request) error {
			if !ready.Load() {
				return errors.New("informers not synced yet")
			}
			return nil
		}))
	}

	// Start everything.
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	for _, c := range runners {
		g.Go(func() error { return c.Run(workers, ctx) })
	}
	g.Go(func() error { return mgr.Start(ctx) })
	klog.InfoS("cert-manager-local started", "controllers", controllers)

	// cert-manager's own metrics (controller sync counts, ...), if asked for.
	if metricsListener != nil {
		server := shared.Metrics.NewServer(metricsListener)
		g.Go(func() error {
			go func() { <-ctx.Done(); _ = server.Close() }()
			if err := server.Serve(metricsListener); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}

	// Readiness: once the cainjector's and the controllers' informers have synced.
	g.Go(func() error {
		synced := mgr.GetCache().WaitForCacheSync(ctx)
		for _, ok := range shared.KubeSharedInformerFactory.WaitForCacheSync(ctx.Done()) {
			synced = synced && ok
		}
		for _, ok := range shared.SharedInformerFactory.WaitForCacheSync(ctx.Done()) {
			synced = synced && ok
		}
		if synced {
			ready.Store(true)
			klog.InfoS("cert-manager-local ready")
		}
		return nil
	})

	// Wait for every component to stop. controller-runtime v0.24's manager does not return
	// when stopped before its caches synced (it spins), so a stop waits for it 15s at most.
	stopped := make(chan error, 1)
	go func() { stopped <- g.Wait() }()
	select {
	case err = <-stopped:
		shared.KubeSharedInformerFactory.Shutdown()
		shared.SharedInformerFactory.Shutdown()
	case <-afterDone(ctx, 15*time.Second):
		err = context.Cause(ctx) // the first component's error, or the signal's cancellation
	}
	if signalled.Err() != nil {
		klog.InfoS("cert-manager-local stopped")
		return nil // a signal: components that were still starting return errors; not a failure
	}
	return err
}

// afterDone is closed delay after ctx is done.
func afterDone(ctx context.Context, delay time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		<-ctx.Done()
		time.Sleep(delay)
		close(ch)
	}()
	return ch
}

// waitForCRDs waits until the API server serves cert-manager.io/v1 Certificates (the CRDs are
// installed and established), for up to timeout, or until ctx ends (then it returns nil).
func waitForCRDs(ctx context.Context, restConfig *rest.Config, timeout time.Duration) error {
	config := rest.CopyConfig(restConfig)
	config.Timeout = 5 * time.Second
	client, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		resources, err := client.ServerResourcesForGroupVersion(cmapi.SchemeGroupVersion.String())
		if err == nil && slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "certificates" }) {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("cannot reach the API server at %s: %w", restConfig.Host, err)
			}
			return fmt.Errorf("the API server at %s does not serve cert-manager.io/v1 certificates: install the CRDs (python -m testbed.certmanager crds) first",
				restConfig.Host)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

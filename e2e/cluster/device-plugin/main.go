// A device plugin for the e2e real node: advertises N fake GPUs (nvidia.com/gpu by default)
// to the kubelet over its device-plugin gRPC API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1,
// the API every real GPU plugin speaks), so the scheduler places a ModelDeployment's pod on
// the real node exactly as on a GPU node. Allocate hands out no device nodes: the model server
// runs on CPU, and NVIDIA_VISIBLE_DEVICES only names the ids it was given.
//
// The kubelet removes every socket in its device-plugin directory when it restarts; the plugin
// watches its own socket and serves and registers again when it is gone.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	stop    chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	// The devices never change: hold the stream until the plugin or the kubelet goes.
	select {
	case <-p.stop:
	case <-s.Context().Done():
	}
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		log.Printf("allocate %s", strings.Join(c.DevicesIds, ","))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIds, ",")},
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func register(dir, endpoint, resource string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     endpoint,
		ResourceName: resource,
	})
	return err
}

// serve listens on the plugin's socket and registers with the kubelet; it returns the server
// once both are done, or an error.
func serve(dir, endpoint, resource string, p *plugin) (*grpc.Server, error) {
	sock := filepath.Join(dir, endpoint)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	if err := register(dir, endpoint, resource); err != nil {
		srv.Stop()
		return nil, fmt.Errorf("register with the kubelet: %w", err)
	}
	log.Printf("serving %d x %s on %s", len(p.devices), resource, sock)
	return srv, nil
}

func main() {
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	count := flag.Int("count", 1, "devices to advertise")
	flag.Parse()
	endpoint := "pao-e2e-gpu.sock"

	devices := make([]*pluginapi.Device, 0, *count)
	for i := 0; i < *count; i++ {
		devices = append(devices, &pluginapi.Device{ID: fmt.Sprintf("gpu-%d", i), Health: pluginapi.Healthy})
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var srv *grpc.Server
	var p *plugin
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(filepath.Join(*dir, endpoint)); srv == nil || err != nil {
			if srv != nil {
				log.Printf("socket gone (kubelet restarted): serving again")
				close(p.stop)
				srv.Stop()
				srv = nil
			}
			p = &plugin{devices: devices, stop: make(chan struct{})}
			s, err := serve(*dir, endpoint, *resource, p)
			if err != nil {
				log.Printf("%v (retrying)", err)
			} else {
				srv = s
			}
		}
		select {
		case <-sigs:
			if srv != nil {
				close(p.stop)
				srv.Stop()
			}
			_ = os.Remove(filepath.Join(*dir, endpoint))
			return
		case <-tick.C:
		}
	}
}

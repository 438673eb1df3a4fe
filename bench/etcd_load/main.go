// Command etcd-load is bench/http.py's load generator for etcd's native API: gRPC
// through the Go client (clientv3), as etcd's users reach it.
//
// N clients (goroutines, each one request in flight) share M gRPC connections
// round-robin and send one operation for a duration: put, linearizable get or
// serializable get, each on a random key among --keys (PREFIX + %06d) with values
// of --value-bytes. --preload first writes every key once (not measured); with
// --duration 0 that is all it does. It prints one JSON line:
//
//	{"op":...,"ops":N,"errors":N,"missing":N,"seconds":S,"ops_per_s":X,"p50_ms":X,"p99_ms":X,...}
//
// "errors" counts failed requests (timeouts included) and GETs that found no key.
//
// Build (GOPATH mode, from Debian's golang-go and golang-etcd-server-dev):
//
//	GOPATH=$SCRATCH:/usr/share/gocode GO111MODULE=off go build -o $SCRATCH/etcd-load ./bench/etcd_load
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.uber.org/zap"
)

type options struct {
	endpoints   []string
	op          string
	duration    time.Duration
	clients     int
	conns       int
	keys        int
	valueBytes  int
	prefix      string
	preload     bool
	timeout     time.Duration
	dialTimeout time.Duration
}

type report struct {
	Op        string  `json:"op"`
	Endpoints string  `json:"endpoints"`
	Clients   int     `json:"clients"`
	Conns     int     `json:"conns"`
	Keys      int     `json:"keys"`
	Preloaded int     `json:"preloaded"`
	Ops       int64   `json:"ops"`
	Errors    int64   `json:"errors"`
	Missing   int64   `json:"missing"`
	Seconds   float64 `json:"seconds"`
	OpsPerS   float64 `json:"ops_per_s"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
	FirstErr  string  `json:"first_error,omitempty"`
}

func parseOptions() (options, error) {
	var o options
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated client URLs or host:port")
	flag.StringVar(&o.op, "op", "put", "put | get-linearizable | get-serializable")
	o.duration = 10 * time.Second
	flag.Func("duration", "how long to load: 10s, 1m or seconds (0: only --preload; default 10s)",
		func(text string) (err error) {
			o.duration, err = parseDuration(text)
			return err
		})
	flag.IntVar(&o.clients, "clients", 64, "concurrent clients, one request in flight each")
	flag.IntVar(&o.conns, "conns", 64, "gRPC connections the clients share round-robin")
	flag.IntVar(&o.keys, "keys", 10000, "the key space: random keys among this many")
	flag.IntVar(&o.valueBytes, "value-bytes", 100, "bytes per value")
	flag.StringVar(&o.prefix, "prefix", "bench-", "key prefix")
	flag.BoolVar(&o.preload, "preload", false, "write every key once before the load")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Second, "per-request timeout (counts as an error)")
	flag.DurationVar(&o.dialTimeout, "dial-timeout", 10*time.Second, "connection timeout")
	flag.Parse()
	for _, e := range strings.Split(*endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			o.endpoints = append(o.endpoints, e)
		}
	}
	switch {
	case len(o.endpoints) == 0:
		return o, errors.New("--endpoints is empty")
	case o.op != "put" && o.op != "get-linearizable" && o.op != "get-serializable":
		return o, fmt.Errorf("--op %q: want put, get-linearizable or get-serializable", o.op)
	case o.clients < 1 || o.conns < 1 || o.keys < 1 || o.valueBytes < 0:
		return o, errors.New("--clients, --conns and --keys must be at least 1")
	case o.duration < 0:
		return o, errors.New("--duration must not be negative")
	}
	if o.conns > o.clients {
		o.conns = o.clients // a connection without a client would sit idle
	}
	return o, nil
}

// parseDuration reads a Go duration ("2s", "1m") or a plain number of seconds ("2.5").
func parseDuration(text string) (time.Duration, error) {
	if seconds, err := strconv.ParseFloat(text, 64); err == nil {
		return time.Duration(seconds * float64(time.Second)), nil
	}
	return time.ParseDuration(text)
}

func connect(o options) ([]*clientv3.Client, error) {
	logs := zap.NewProductionConfig() // the client's own log: errors only, to stderr
	logs.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	logs.OutputPaths, logs.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	conns := make([]*clientv3.Client, 0, o.conns)
	for i := 0; i < o.conns; i++ {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   o.endpoints,
			DialTimeout: o.dialTimeout,
			LogConfig:   &logs,
		})
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("connection %d to %s: %w", i, strings.Join(o.endpoints, ","), err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func closeAll(conns []*clientv3.Client) {
	for _, c := range conns {
		c.Close()
	}
}

func key(o options, i int) string {
	return fmt.Sprintf("%s%06d", o.prefix, i)
}

// counters are shared by the clients of one phase.
type counters struct {
	errors   int64
	missing  int64
	firstErr atomic.Value
}

func (c *counters) fail(err error) {
	atomic.AddInt64(&c.errors, 1)
	c.firstErr.CompareAndSwap(nil, err.Error())
}

// preload writes keys 0..keys-1 once, spread over the clients.
func preload(o options, conns []*clientv3.Client, value string, c *counters) int64 {
	var next, done int64 = -1, 0
	var wg sync.WaitGroup
	for w := 0; w < o.clients; w++ {
		wg.Add(1)
		go func(kv clientv3.KV) {
			defer wg.Done()
			for i := atomic.AddInt64(&next, 1); i < int64(o.keys); i = atomic.AddInt64(&next, 1) {
				ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
				_, err := kv.Put(ctx, key(o, int(i)), value)
				cancel()
				if err != nil {
					c.fail(err)
					continue
				}
				atomic.AddInt64(&done, 1)
			}
		}(conns[w%len(conns)])
	}
	wg.Wait()
	return done
}

// load runs o.op on random keys until the deadline; each client keeps its latencies.
func load(o options, conns []*clientv3.Client, value string, c *counters) ([][]time.Duration, time.Duration) {
	latencies := make([][]time.Duration, o.clients)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(o.duration)
	for w := 0; w < o.clients; w++ {
		wg.Add(1)
		go func(w int, kv clientv3.KV) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(time.Now().UnixNano() + int64(w)*7919))
			var opts []clientv3.OpOption
			if o.op == "get-serializable" {
				opts = append(opts, clientv3.WithSerializable())
			}
			own := make([]time.Duration, 0, 4096)
			for time.Now().Before(deadline) {
				k := key(o, rng.Intn(o.keys))
				ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
				began := time.Now()
				var err error
				if o.op == "put" {
					_, err = kv.Put(ctx, k, value)
				} else {
					var resp *clientv3.GetResponse
					resp, err = kv.Get(ctx, k, opts...)
					if err == nil && len(resp.Kvs) == 0 {
						atomic.AddInt64(&c.missing, 1)
					}
				}
				took := time.Since(began)
				cancel()
				if err != nil {
					c.fail(err)
					continue
				}
				own = append(own, took)
			}
			latencies[w] = own
		}(w, conns[w%len(conns)])
	}
	wg.Wait()
	return latencies, time.Since(start)
}

func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(sorted)))
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return float64(sorted[i]) / float64(time.Millisecond)
}

func run(o options) (report, error) {
	r := report{
		Op: o.op, Endpoints: strings.Join(o.endpoints, ","),
		Clients: o.clients, Conns: o.conns, Keys: o.keys,
	}
	conns, err := connect(o)
	if err != nil {
		return r, err
	}
	defer closeAll(conns)
	value := strings.Repeat("v", o.valueBytes)
	var c counters
	if o.preload {
		r.Preloaded = int(preload(o, conns, value, &c))
		if r.Preloaded != o.keys {
			return r, fmt.Errorf("preload wrote %d of %d keys: %v", r.Preloaded, o.keys, c.firstErr.Load())
		}
	}
	if o.duration > 0 {
		perClient, took := load(o, conns, value, &c)
		var all []time.Duration
		for _, own := range perClient {
			all = append(all, own...)
		}
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		r.Ops = int64(len(all))
		r.Seconds = took.Seconds()
		r.OpsPerS = float64(r.Ops) / r.Seconds
		r.P50Ms, r.P99Ms, r.MaxMs = percentile(all, 50), percentile(all, 99), percentile(all, 100)
	}
	r.Errors = c.errors + c.missing
	r.Missing = c.missing
	if first, ok := c.firstErr.Load().(string); ok {
		r.FirstErr = first
	}
	return r, nil
}

func main() {
	o, err := parseOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-load:", err)
		os.Exit(2)
	}
	r, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-load:", err)
		os.Exit(1)
	}
	line, err := json.Marshal(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-load:", err)
		os.Exit(1)
	}
	fmt.Println(string(line))
}

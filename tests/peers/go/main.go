// The redsync peer of ferrisson's token-lock tests (tests/it/token_interop.rs and friends):
// github.com/go-redsync/redsync/v4 over go-redis v9, driven by JSON lines like the other peers.
//
// Usage: redsync-peer URL [URL...]   (one go-redis client, one redsync pool, per URL)
//
// It prints {"event":"ready",...} once its clients are made, then reads one JSON command per
// stdin line, {"id":N,"op":"...",...}, and answers each with one line carrying the same id,
// "ok", "t" (epoch ms when it finished) and the op's fields; a failure has "ok":false,
// "error" and "error_class" (the redsync error: ErrFailed, ErrTaken, ErrNodeTaken,
// ErrLockAlreadyExpired, ErrExtendFailed, RedisError, or BadCommand). Commands run
// concurrently, so replies may come out of order.
//
// Ops (a "handle" names a redsync Mutex kept by the peer):
//
//	lock     {handle, name, expiry_ms, tries?, retry_delay_ms?, value?}  -> {value, until_ms}
//	try_lock {handle, name, expiry_ms, value?}                           -> {value, until_ms}
//	mutex    {handle, name, value, expiry_ms}: a Mutex for a token it did not take
//	unlock   {handle}                                                    -> {result}
//	extend   {handle}                                                    -> {result, until_ms}
//	valid    {handle}                                                    -> {result}
//	quit
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

var (
	out     sync.Mutex
	mutexes sync.Map // handle -> *redsync.Mutex
	rs      *redsync.Redsync
)

func emit(reply map[string]any) {
	reply["t"] = time.Now().UnixMilli()
	line, err := json.Marshal(reply)
	if err != nil {
		line = []byte(`{"ok":false,"error":"cannot encode a reply"}`)
	}
	out.Lock()
	defer out.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

type command map[string]any

func (c command) str(field string) (string, error) {
	v, ok := c[field].(string)
	if !ok || v == "" {
		return "", badCommand(fmt.Sprintf("field %q must be a non-empty string", field))
	}
	return v, nil
}

func (c command) millis(field string, fallback int) (time.Duration, error) {
	n, err := c.num(field, fallback)
	return time.Duration(n) * time.Millisecond, err
}

func (c command) num(field string, fallback int) (int, error) {
	v, present := c[field]
	if !present || v == nil {
		return fallback, nil
	}
	f, ok := v.(float64)
	if !ok || f < 0 {
		return 0, badCommand(fmt.Sprintf("field %q must be a non-negative number", field))
	}
	return int(f), nil
}

type badCommand string

func (b badCommand) Error() string { return string(b) }

// errorClass names a redsync error for the tests.
func errorClass(err error) string {
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	var redisErr *redsync.RedisError
	var bad badCommand
	switch {
	case errors.As(err, &bad):
		return "BadCommand"
	case errors.As(err, &taken):
		return "ErrTaken"
	case errors.As(err, &nodeTaken):
		return "ErrNodeTaken"
	case errors.Is(err, redsync.ErrLockAlreadyExpired):
		return "ErrLockAlreadyExpired"
	case errors.Is(err, redsync.ErrExtendFailed):
		return "ErrExtendFailed"
	case errors.Is(err, redsync.ErrFailed):
		return "ErrFailed"
	case errors.As(err, &redisErr):
		return "RedisError"
	default:
		return fmt.Sprintf("%T", err)
	}
}

// newMutex makes the Mutex of a lock/try_lock/mutex command and keeps it under its handle.
func newMutex(c command) (*redsync.Mutex, error) {
	handle, err := c.str("handle")
	if err != nil {
		return nil, err
	}
	name, err := c.str("name")
	if err != nil {
		return nil, err
	}
	expiry, err := c.millis("expiry_ms", 8000)
	if err != nil {
		return nil, err
	}
	tries, err := c.num("tries", 32)
	if err != nil {
		return nil, err
	}
	delay, err := c.millis("retry_delay_ms", 50)
	if err != nil {
		return nil, err
	}
	options := []redsync.Option{
		redsync.WithExpiry(expiry),
		redsync.WithTries(tries),
		redsync.WithRetryDelay(delay),
	}
	if value, ok := c["value"].(string); ok && value != "" {
		options = append(options, redsync.WithValue(value))
	}
	m := rs.NewMutex(name, options...)
	mutexes.Store(handle, m)
	return m, nil
}

func mutexOf(c command) (*redsync.Mutex, error) {
	handle, err := c.str("handle")
	if err != nil {
		return nil, err
	}
	m, ok := mutexes.Load(handle)
	if !ok {
		return nil, badCommand(fmt.Sprintf("no mutex %q", handle))
	}
	return m.(*redsync.Mutex), nil
}

// byMutex runs act on the mutex the command names: its boolean is the reply's "result", beside
// the mutex's validity end "until_ms".
func byMutex(c command, act func(*redsync.Mutex) (bool, error)) (map[string]any, error) {
	m, err := mutexOf(c)
	if err != nil {
		return nil, err
	}
	result, err := act(m)
	if err != nil {
		return nil, err
	}
	return map[string]any{"result": result, "until_ms": m.Until().UnixMilli()}, nil
}

func run(c command) (map[string]any, error) {
	op, _ := c["op"].(string)
	ctx := context.Background()
	switch op {
	case "lock", "try_lock":
		m, err := newMutex(c)
		if err != nil {
			return nil, err
		}
		if op == "lock" {
			err = m.LockContext(ctx)
		} else {
			err = m.TryLockContext(ctx)
		}
		if err != nil {
			return nil, err
		}
		return map[string]any{"value": m.Value(), "until_ms": m.Until().UnixMilli()}, nil
	case "mutex":
		if _, err := c.str("value"); err != nil {
			return nil, err
		}
		m, err := newMutex(c)
		if err != nil {
			return nil, err
		}
		return map[string]any{"value": m.Value()}, nil
	case "unlock":
		return byMutex(c, func(m *redsync.Mutex) (bool, error) { return m.UnlockContext(ctx) })
	case "extend":
		return byMutex(c, func(m *redsync.Mutex) (bool, error) { return m.ExtendContext(ctx) })
	case "valid":
		return byMutex(c, func(m *redsync.Mutex) (bool, error) { return m.ValidContext(ctx) })
	case "quit":
		go func() {
			time.Sleep(50 * time.Millisecond)
			os.Exit(0)
		}()
		return map[string]any{}, nil
	default:
		return nil, badCommand(fmt.Sprintf("unknown op %q", op))
	}
}

func handle(line []byte) {
	var c command
	if err := json.Unmarshal(line, &c); err != nil {
		emit(map[string]any{"id": nil, "ok": false, "error": "bad JSON: " + err.Error(), "error_class": "BadCommand"})
		return
	}
	reply, err := run(c)
	if err != nil {
		reply = map[string]any{"ok": false, "error": err.Error(), "error_class": errorClass(err)}
	} else {
		reply["ok"] = true
	}
	reply["id"] = c["id"]
	emit(reply)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: redsync-peer URL [URL...]")
		os.Exit(2)
	}
	pools := []redis.Pool{}
	for _, url := range os.Args[1:] {
		options, err := goredislib.ParseURL(url)
		if err != nil {
			emit(map[string]any{"event": "error", "error": err.Error()})
			os.Exit(1)
		}
		// A stopped server fails a call quickly instead of stalling the Redlock round.
		options.DialTimeout = 500 * time.Millisecond
		options.ReadTimeout = 500 * time.Millisecond
		options.WriteTimeout = 500 * time.Millisecond
		options.MaxRetries = -1
		pools = append(pools, goredis.NewPool(goredislib.NewClient(options)))
	}
	rs = redsync.New(pools...)
	emit(map[string]any{"event": "ready", "pid": os.Getpid(), "servers": len(pools)})

	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<16), 1<<20)
	var running sync.WaitGroup
	for scanner.Scan() {
		line := append([]byte(nil), scanner.Bytes()...)
		if len(line) == 0 {
			continue
		}
		running.Add(1)
		go func() {
			defer running.Done()
			handle(line)
		}()
	}
	// The test went away: do not linger.
	os.Exit(0)
}

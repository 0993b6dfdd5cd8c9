package clienttest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cronoq/cronoq/client"
	"github.com/cronoq/cronoq/client/clienttest"
)

// An SDK user's test: submit a task, run a worker with the handler under
// test against the fake cluster, and read the task's result. In a test,
// clienttest.NewCluster(t) starts the cluster and closes it at the end.
func Example() {
	cluster, err := clienttest.New(clienttest.WithNodes(3))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	cl, err := client.New(cluster.Addrs())
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sub, err := cl.Submit(ctx, client.TaskSpec{Template: client.Template{
		Pool: "emails", Kind: "welcome", Payload: []byte("ada@example.com"),
	}})
	if err != nil {
		panic(err)
	}

	// The handler under test.
	send := client.HandlerFunc(func(_ context.Context, job *client.Job) ([]byte, error) {
		return []byte("sent to " + string(job.Task.Payload)), nil
	})
	w, err := cl.NewWorker(client.WorkerConfig{Pool: "emails", Handlers: map[string]client.Handler{"welcome": send}})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()

	task, err := cl.Wait(ctx, sub.ID)
	if err != nil {
		panic(err)
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	fmt.Println(task.Status, task.Attempt, string(task.Output))
	// Output: succeeded 1 sent to ada@example.com
}

// A workflow in an SDK user's test: submit its steps, run the handlers
// under test (one reads its dependency's output, and spawns a child), wait
// for the workflow and read what each member ended with.
func Example_workflow() {
	cluster, err := clienttest.New()
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	cl, err := client.New(cluster.Addrs())
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sub, err := cl.SubmitWorkflow(ctx, client.WorkflowSpec{Name: "monthly", Steps: []client.Step{
		{Name: "fetch", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "fetch", Payload: []byte("2026-01")}}},
		{Name: "render", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "render"}}, DependsOn: []string{"fetch"}},
	}})
	if err != nil {
		panic(err)
	}

	// The handlers under test.
	handlers := map[string]client.Handler{
		"fetch": client.HandlerFunc(func(_ context.Context, job *client.Job) ([]byte, error) {
			return []byte("rows of " + string(job.Task.Payload)), nil
		}),
		"render": client.HandlerFunc(func(ctx context.Context, job *client.Job) ([]byte, error) {
			rows, err := job.DependencyOutput(ctx, "fetch")
			if err != nil {
				return nil, err
			}
			job.Spawn(client.Step{Name: "mail", Task: client.TaskSpec{Template: client.Template{Pool: "etl", Kind: "mail"}}})
			return []byte("report of " + string(rows)), nil
		}),
		"mail": client.HandlerFunc(func(context.Context, *client.Job) ([]byte, error) { return []byte("sent"), nil }),
	}
	w, err := cl.NewWorker(client.WorkerConfig{Pool: "etl", Handlers: handlers})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()

	wf, err := cl.WaitWorkflow(ctx, sub.ID)
	if err != nil {
		panic(err)
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	fmt.Println(wf.Name, wf.Status)
	for _, task := range wf.Tasks {
		fmt.Printf("%s: %s %q\n", task.Step, task.Status, task.Output)
	}
	// Output:
	// monthly succeeded
	// fetch: succeeded "rows of 2026-01"
	// render: succeeded "report of rows of 2026-01"
	// mail: succeeded "sent"
}

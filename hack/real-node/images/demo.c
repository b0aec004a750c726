/* The test image's only binary, static, no shell needed.
 *   demo                 prints its environment and every file named in DEMO_FILES
 *                        (colon-separated, e.g. downward-API files), then sleeps until
 *                        SIGTERM, printing a heartbeat line every DEMO_BEAT seconds;
 *                        with DEMO_HTTP_PORT set it answers every HTTP request on
 *                        that port with 200 instead (for readiness probes).
 *   demo cat FILE...     prints the files (for kubectl exec)
 *   demo env             prints the environment (for kubectl exec)
 *   demo ip              prints /proc/self/net/dev and /proc/self/net/fib_trie: the
 *                        pod's interfaces and IPv4 addresses (for kubectl exec)
 *   demo connect IP PORT opens a TCP connection and says whether it succeeded
 *   demo get IP PORT N   N HTTP/1.0 GETs of /, one connection each, each answer read to
 *                        its end; prints how many got a 200 (exit 1 unless all did) */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static void on_stop(int sig) {
  (void)sig;
  static const char msg[] = "demo: SIGTERM, exiting\n";
  write(1, msg, sizeof msg - 1);
  _exit(0);
}

static int cat(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "demo: cannot open %s\n", path);
    return 1;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
  fclose(f);
  return 0;
}

static void env(void) {
  for (char **e = environ; *e; e++) printf("%s\n", *e);
}

/* One GET of / on a new connection; whether the answer was a 200. */
static int get(const struct sockaddr_in *a) {
  static const char req[] = "GET / HTTP/1.0\r\n\r\n";
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0 || connect(s, (const struct sockaddr *)a, sizeof *a) != 0 ||
      write(s, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
    if (s >= 0) close(s);
    return 0;
  }
  char buf[256];
  ssize_t n, total = 0;
  int ok = 0;
  while ((n = read(s, buf, sizeof buf)) > 0) {
    if (total == 0 && n >= 12 && memcmp(buf + 9, "200", 3) == 0) ok = 1;
    total += n;
  }
  close(s);
  return ok;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && strcmp(argv[1], "cat") == 0) {
    int rc = 0;
    for (int i = 2; i < argc; i++) rc |= cat(argv[i]);
    return rc;
  }
  if (argc > 1 && strcmp(argv[1], "env") == 0) {
    env();
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "ip") == 0) {
    return cat("/proc/self/net/dev") | cat("/proc/self/net/fib_trie");
  }
  if (argc > 4 && strcmp(argv[1], "get") == 0) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[3]))};
    if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) {
      fprintf(stderr, "demo: bad IPv4 address %s\n", argv[2]);
      return 2;
    }
    int n = atoi(argv[4]), ok = 0;
    for (int i = 0; i < n; i++) ok += get(&a);
    printf("get %s:%s %d/%d ok\n", argv[2], argv[3], ok, n);
    return ok == n ? 0 : 1;
  }
  if (argc > 3 && strcmp(argv[1], "connect") == 0) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[3]))};
    if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) {
      fprintf(stderr, "demo: bad IPv4 address %s\n", argv[2]);
      return 2;
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
      printf("connect %s:%s failed\n", argv[2], argv[3]);
      return 1;
    }
    printf("connect %s:%s ok\n", argv[2], argv[3]);
    return 0;
  }
  struct sigaction stop = {.sa_handler = on_stop};
  sigaction(SIGTERM, &stop, NULL);
  sigaction(SIGINT, &stop, NULL);

  char host[256] = "";
  gethostname(host, sizeof host - 1);
  printf("demo: started on host %s, pid %d\n--- env\n", host, (int)getpid());
  env();
  const char *files = getenv("DEMO_FILES");
  if (files) {
    char *list = strdup(files);
    for (char *p = strtok(list, ":"); p; p = strtok(NULL, ":")) {
      printf("--- %s\n", p);
      cat(p);
      printf("\n");
    }
    free(list);
  }
  const char *port = getenv("DEMO_HTTP_PORT");
  if (port) {
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(port))};
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 16) != 0) {
      perror("demo: listen");
      return 1;
    }
    printf("--- serving HTTP on :%s\n", port);
    static const char ok[] = "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
    for (;;) {
      int c = accept(l, NULL, NULL);
      if (c < 0) continue;
      char req[1024];
      read(c, req, sizeof req);
      write(c, ok, sizeof ok - 1);
      close(c);
    }
  }
  printf("--- sleeping\n");
  const char *beat = getenv("DEMO_BEAT");
  unsigned secs = beat ? (unsigned)atoi(beat) : 0;
  for (;;) {
    if (secs) {
      sleep(secs);
      printf("demo: alive at %ld\n", (long)time(NULL));
    } else {
      pause();
    }
  }
}

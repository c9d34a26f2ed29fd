/* The peer of `weft ping --transport inproc|tcp`: Open MPI's one-way latency and bandwidth
 * between two ranks of one host, through whichever BTL the command line selects (vader/sm:
 * `--mca btl self,vader`, or `self,tcp`). Same measure as weft ping: per size, `iters` timed
 * round trips after a warm-up, one-way = RTT / 2, p50 and p99 of those, MB/s = size / mean
 * one-way. One JSON line per size on rank 0's stdout; with a third argument `raw`, each line
 * carries the round-trip times instead (`rtt_ns`), which `weft ping --compare --peer vader`
 * reads.
 *
 *   mpicc -O2 -o vader_pingpong tools/peers/vader_pingpong.c
 *   mpirun --allow-run-as-root -np 2 --bind-to core --mca btl self,vader \
 *       ./vader_pingpong 10000 32,65536,1048576
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long iters = argc > 1 ? atol(argv[1]) : 10000;
    const char *list = argc > 2 ? argv[2] : "32";
    const char *btl = getenv("OMPI_MCA_btl");
    int raw = argc > 3 && strcmp(argv[3], "raw") == 0;
    long warm = iters / 10 < 10 ? 10 : (iters / 10 > 1000 ? 1000 : iters / 10);
    char *sizes = strdup(list);
    double *oneway = malloc(sizeof(double) * iters);
    for (char *tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
        long size = atol(tok);
        char *buf = aligned_alloc(4096, (size_t)(size + 4096) / 4096 * 4096);
        memset(buf, 0x5a, size);
        for (long i = 0; i < warm + iters; i++) {
            double t = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
            }
            if (i >= warm)
                oneway[i - warm] = (MPI_Wtime() - t) * 1e6 / 2;
        }
        if (rank == 0 && raw) {
            printf("{\"size\":%ld,\"rtt_ns\":[", size);
            for (long i = 0; i < iters; i++)
                printf(i ? ",%.0f" : "%.0f", oneway[i] * 2e3);
            printf("]}\n");
        } else if (rank == 0) {
            double sum = 0;
            for (long i = 0; i < iters; i++)
                sum += oneway[i];
            qsort(oneway, iters, sizeof(double), cmp);
            printf("{\"size\":%ld,\"peer\":\"openmpi\",\"btl\":\"%s\",\"iters\":%ld,"
                   "\"p50_us\":%.3f,\"p99_us\":%.3f,\"mb_per_s\":%.1f}\n",
                   size, btl ? btl : "default", iters, oneway[iters / 2],
                   oneway[(long)(iters * 0.99)], size / (sum / iters));
        }
        free(buf);
    }
    free(sizes);
    free(oneway);
    MPI_Finalize();
    return 0;
}

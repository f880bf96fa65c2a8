/* mpi_pingpong.c — the alpha (one-way small-message latency, seconds) of the cost model in
 * docs/scaling.md, measured between rank 0 and the last rank: half the mean round trip of a 4-byte
 * MPI_Send/MPI_Recv ping-pong (Hockney's alpha). bench/overlap_nodes.sh builds it with mpicc.
 * Usage: mpirun -np N mpi_pingpong [ITERS]   (prints "alpha_us <value>" on rank 0; exit 2 on bad use) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const int iters = argc > 1 ? atoi(argv[1]) : 2000;
  if (n < 2 || iters < 1) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: needs 2 or more ranks and ITERS >= 1\n");
    MPI_Finalize();
    return 2;
  }
  const int peer = rank == 0 ? n - 1 : 0;
  float x = 1.0f;
  double t0 = 0.0;
  for (int i = -100; i < iters; ++i) {  /* 100 warm-up round trips: connections are set up lazily */
    if (i == 0) t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(&x, 1, MPI_FLOAT, peer, 0, MPI_COMM_WORLD);
      MPI_Recv(&x, 1, MPI_FLOAT, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == n - 1) {
      MPI_Recv(&x, 1, MPI_FLOAT, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(&x, 1, MPI_FLOAT, peer, 0, MPI_COMM_WORLD);
    }
  }
  if (rank == 0) printf("alpha_us %.1f\n", (MPI_Wtime() - t0) / iters / 2 * 1e6);
  MPI_Finalize();
  return 0;
}

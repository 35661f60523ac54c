/* SPDX-License-Identifier: BSD-3-Clause */
/* Creating a cohort communicator from an existing MPI job: MPI does the out-of-band exchange,
 * cohort does the collectives (the pattern frameworks with their own store follow too).
 *   mpicc mpi_bootstrap.c $(pkg-config --cflags --libs cohort) -o mpi_bootstrap
 *   mpirun -np 4 ./mpi_bootstrap
 * No COHORT_RENDEZVOUS is needed: the bootstrap goes through MPI_Allgather. */
#include <cohort/cohort.h>
#include <mpi.h>
#include <stdio.h>

static int mpi_allgather(const void *sendbuf, void *recvbuf, size_t nbytes, void *ctx)
{
    MPI_Comm comm = *(MPI_Comm *)ctx;
    return MPI_Allgather(sendbuf, (int)nbytes, MPI_BYTE, recvbuf, (int)nbytes, MPI_BYTE, comm)
           == MPI_SUCCESS ? 0 : 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm world = MPI_COMM_WORLD;
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    cohort_comm_t *comm;
    cohort_status_t st = cohort_comm_init_oob(rank, size, mpi_allgather, &world, &comm);
    if (st != COHORT_SUCCESS) {
        fprintf(stderr, "rank %d: cohort_comm_init_oob: %s\n", rank, cohort_last_error());
        MPI_Abort(world, 1);
    }
    double x = rank, sum = 0;
    st = cohort_allreduce(comm, &x, &sum, 1, COHORT_FLOAT64, COHORT_SUM);
    if (st == COHORT_SUCCESS && rank == 0) printf("sum of ranks = %g\n", sum);
    cohort_comm_destroy(comm);
    MPI_Finalize();
    return st == COHORT_SUCCESS ? 0 : 1;
}

/* Values that mpi.h defines as macros and whose values differ between MPI libraries
 * (Open MPI: MPI_IN_PLACE is (void *) 1; MPICH: (void *) -1). Compiled against the MPI's own mpi.h so the
 * Rust side never hard-codes them. */
#include <mpi.h>

void *collectives_mpi_in_place(void) { return MPI_IN_PLACE; }

int collectives_mpi_tag_ub_key(void) { return MPI_TAG_UB; }

int collectives_mpi_undefined(void) { return MPI_UNDEFINED; }

int collectives_mpi_success(void) { return MPI_SUCCESS; }

MPI_Info collectives_mpi_info_env(void) { return MPI_INFO_ENV; }

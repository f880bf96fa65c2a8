// xtrain_mpi entry point (being written).
int main() { return 0; }
